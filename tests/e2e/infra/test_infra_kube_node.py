"""End-to-end check of the real single-node cluster (tests/e2e/infra/kube_node.py): pods run
real containers under a real kubelet, logs come back through the API, cluster DNS answers
from Endpoints, and a killed run's node is reaped without a trace."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra import kube_reap
from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_images import BUSYBOX_IMAGE
from tests.e2e.infra.kube_node import RealNode
from tests.e2e.infra.kube_node_fixtures import RealKube
from tests.e2e.infra.reaper import forget

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 90.0) -> Any:
    """Polls ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def busybox(name: str, script: str) -> client.V1Container:
    """A busybox container running ``sh -c script``, never pulled."""
    return client.V1Container(
        name=name,
        image=BUSYBOX_IMAGE,
        image_pull_policy="Never",
        command=["/bin/sh", "-c", script],
    )


def run_job(api: Any, ns: str, name: str, script: str) -> client.V1Pod:
    """Runs a one-pod Job to its end and returns its (terminated) pod."""
    batch, v1 = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1JobSpec(
                backoff_limit=0,
                template=client.V1PodTemplateSpec(
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[busybox("main", script)],
                        termination_grace_period_seconds=1,
                    )
                ),
            ),
        ),
    )

    def finished() -> client.V1Pod | None:
        for pod in v1.list_namespaced_pod(ns, label_selector=f"job-name={name}").items:
            if pod.status.phase in ("Succeeded", "Failed"):
                return pod
        return None

    pod: client.V1Pod = wait_until(f"job {name}'s pod to finish", finished)
    return pod


def test_job_pod_runs_a_container_and_its_log_comes_back(real_kube: RealKube) -> None:
    """A Job's pod really runs: its exit code and its log come from containerd via the
    kubelet, and the Job controller marks the Job by that exit code."""
    api, ns = real_kube.api, "node-run"
    create_namespace(api, ns)
    token = uuid.uuid4().hex
    # Kubernetes expands $(VAR) in commands and turns $$ into $: "$$$$" reaches sh as "$$".
    ok = run_job(api, ns, "ok", f"echo hello-{token}; echo pid=$$$$")
    assert ok.status.phase == "Succeeded"
    log = client.CoreV1Api(api).read_namespaced_pod_log(ok.metadata.name, ns)
    assert f"hello-{token}" in log
    assert "pid=1" in log  # a real container: the shell is PID 1 of its own PID namespace

    bad = run_job(api, ns, "bad", "echo failing >&2; exit 3")
    assert bad.status.phase == "Failed"
    term = bad.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (3, "Error")
    batch = client.BatchV1Api(api)
    wait_until(
        "job bad Failed",
        lambda: any(
            c.type == "Failed" and c.status == "True"
            for c in batch.read_namespaced_job_status("bad", ns).status.conditions or []
        ),
    )


def test_cluster_dns_resolves_headless_service_replicas(real_kube: RealKube) -> None:
    """A pod with hostname + subdomain is reachable by its cluster DNS name from another
    pod, as tether's replicas find rank 0 (``<host>.<service>.<ns>.svc.cluster.local``)."""
    api, ns = real_kube.api, "node-dns"
    v1 = client.CoreV1Api(api)
    create_namespace(api, ns)
    v1.create_namespaced_service(
        ns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="grp"),
            spec=client.V1ServiceSpec(
                cluster_ip="None", selector={"app": "dns"}, publish_not_ready_addresses=True
            ),
        ),
    )
    token = uuid.uuid4().hex
    v1.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="server", labels={"app": "dns"}),
            spec=client.V1PodSpec(
                hostname="rank0",
                subdomain="grp",
                restart_policy="Never",
                termination_grace_period_seconds=1,
                containers=[busybox("main", f"echo {token} | nc -l -p 7777")],
            ),
        ),
    )
    pod = run_job(
        api,
        ns,
        "client",
        "for i in $(seq 1 60); do "
        "nc rank0.grp.node-dns.svc.cluster.local 7777 && exit 0; sleep 0.5; done; exit 1",
    )
    log = v1.read_namespaced_pod_log(pod.metadata.name, ns)
    assert pod.status.phase == "Succeeded", log
    assert token in log


def _node_traces(node: RealNode) -> dict[str, Any]:
    """What a node could leave on the host."""
    needle = str(node.dir).encode()
    procs = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    procs.append(int(entry.name))
            except OSError:
                pass
    return {
        "processes": procs,
        "mounts": kube_reap.mounts_under(node.dir),
        "bridge": kube_reap.bridge_exists(node.bridge),
        "cgroups": kube_reap.cgroup_dirs(node.cgroup_root),
        "dir": node.dir.exists(),
    }


def _in_mount_namespace(ns: str) -> list[int]:
    """Processes in the mount namespace ``ns`` (``mnt:[inode]``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == ns:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _pod_netns(shims: list[int]) -> set[str]:
    """The names under ``/run/netns`` of the network namespaces of the shims' children (the
    pods' sandboxes and containers), as the shims' own mount namespace shows them."""
    own = os.stat("/proc/self/ns/net").st_ino
    inodes = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid in shims:
                    inodes.add(os.stat(entry / "ns" / "net").st_ino)
            except (OSError, ValueError, IndexError):
                pass
    inodes.discard(own)
    names = set()
    for shim in shims:
        netns = Path(f"/proc/{shim}/root/run/netns")
        try:
            for name in os.listdir(netns):
                if os.stat(netns / name).st_ino in inodes:
                    names.add(name)
        except OSError:
            pass
    return names


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid} (gone)"


def test_killed_run_is_reaped_at_next_start(real_kube: RealKube) -> None:
    """A node whose test process died (kubelet and containerd killed, a pod still running
    under its shim) is removed completely by the next start: no process, mount, bridge,
    network namespace, cgroup or directory is left."""
    node = RealNode(real_kube.cluster, cluster_dns=False).start()
    try:
        v1 = client.CoreV1Api(real_kube.api)
        create_namespace(real_kube.api, "node-reap")
        v1.create_namespaced_pod(
            "node-reap",
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="sleeper"),
                spec=client.V1PodSpec(
                    node_name=node.name,
                    restart_policy="Never",
                    containers=[busybox("main", "sleep 3600")],
                ),
            ),
        )
        wait_until(
            "sleeper running",
            lambda: v1.read_namespaced_pod("sleeper", "node-reap").status.phase == "Running",
        )
        netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        mounts = kube_reap.mounts_under(node.dir, pid=node.namespace_pid)
        assert mounts, "a running pod mounts under the node dir (in the node's namespace)"
        mount_ns = os.readlink(f"/proc/{node.namespace_pid}/ns/mnt")
        # The test process "dies": its children are SIGKILLed; shims and the pod live on.
        for _name, proc, _log in node._procs:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            forget(proc)  # their groups' watchdogs stay with this (living) test process
        (node.dir / kube_reap.OWNER_FILE).write_text("999999999 0\n")
        assert _node_traces(node)["processes"], "shims outlive containerd"
        shims = _in_mount_namespace(mount_ns)
        assert shims, "the shims keep the node's namespace (its mounts)"
        pod_netns = _pod_netns(shims)
        assert pod_netns, "the running pod has a network namespace of its own"
        reaped = kube_reap.reap_stale()
    finally:
        node._procs.clear()
        node.stop()
    assert node.name in reaped
    left = _in_mount_namespace(mount_ns)
    assert left == [], [_cmdline(pid) for pid in left]  # its mounts went with it
    assert _node_traces(node) == {
        "processes": [], "mounts": [], "bridge": False, "cgroups": [], "dir": False,
    }  # fmt: skip
    netns_after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    # only containerd's CRI names its pods' namespaces cni-*: podman (the containers group
    # runs beside this one in CI) makes netns-* ones in the same directory meanwhile
    made = {name for name in netns_after - netns_before if name.startswith("cni-")}
    assert not made
    assert pod_netns <= netns_before and not pod_netns & netns_after  # the pod's is gone
    client.CoreV1Api(real_kube.api).delete_node(node.name)


def _numbered(token: str, count: int) -> str:
    return "".join(f"{token}-{i}\n" for i in range(1, count + 1))


def test_nodes_on_one_host_keep_their_pod_logs(real_kube: RealKube) -> None:
    """Two nodes up at once on one host (the session's and a second one, as with a test that
    starts its own node or a second developer session): each kubelet's garbage collector
    deletes the pod log directories of pods it does not know, so the second node's must not
    see the first node's. The first node's pod logs before the second node starts; once the
    second kubelet has run a garbage collection (seen by its removing a dangling
    ``/var/log/containers`` link planted after its own pod ran), both pods' logs read back
    complete through their kubelets."""
    from tests.e2e.infra.kube_node import start_cluster_with_node

    count, ns = 300, "node-logs"
    older_token, newer_token = uuid.uuid4().hex, uuid.uuid4().hex
    create_namespace(real_kube.api, ns)
    script = f"for i in $(seq 1 {count}); do echo {{t}}-$i; done"
    older = run_job(real_kube.api, ns, "older", script.format(t=older_token))
    v1 = client.CoreV1Api(real_kube.api)
    assert v1.read_namespaced_pod_log(older.metadata.name, ns) == _numbered(older_token, count)

    cluster, node = start_cluster_with_node(cluster_dns=False)
    try:
        with cluster.api_client() as api:
            create_namespace(api, ns)
            newer = run_job(api, ns, "newer", script.format(t=newer_token))
            # The GC removes dangling legacy log links on every run: this one goes at the
            # first collection after the newer pod ran (the kubelet knows all its sources).
            seen_by_kubelet = Path(f"/proc/{node.namespace_pid}/root/var/log/containers")
            sentinel = seen_by_kubelet / "gc-sentinel_gc_gc-0123456789abcdef.log"
            sentinel.symlink_to("/nonexistent/gc-sentinel")
            wait_until("the second kubelet's garbage collection", lambda: not sentinel.is_symlink(),
                       timeout=240)  # fmt: skip
            newer_log = client.CoreV1Api(api).read_namespaced_pod_log(newer.metadata.name, ns)
    finally:
        try:
            node.stop()
        finally:
            cluster.stop()
    assert newer_log == _numbered(newer_token, count)
    assert v1.read_namespaced_pod_log(older.metadata.name, ns) == _numbered(older_token, count)
