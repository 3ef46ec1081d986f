"""End-to-end check of the Kubernetes test infrastructure: real apiserver + controller-manager,
and the test kubelet driving pods, Jobs and logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.infra.kube import (
    KubeCluster,
    create_namespace,
)
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet

# A cold build (TETHER_BUILD_KUBE=1) runs in the first setup: 5 to 9 min on 2 busy cores.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NS_OK = "infra-ok"
NS_FAIL = "infra-fail"
NS_POLICY = "infra-policy"


@pytest.fixture()
def cluster(kube_cluster: KubeCluster) -> KubeCluster:
    """The session's control plane (tests/e2e/conftest.py builds, starts and stops it)."""
    return kube_cluster


@pytest.fixture()
def api(kube_api: client.ApiClient) -> client.ApiClient:
    """An admin API client of the session's cluster."""
    return kube_api


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Polls ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def make_job(name: str, backoff_limit: int = 0) -> client.V1Job:
    """A one-pod batch/v1 Job."""
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=backoff_limit,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="main", image="busybox:1.36", command=["echo", "hi"]
                        )
                    ],
                ),
            ),
        ),
    )


def job_condition(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    """The type of the Job's first true Complete/Failed condition, if any."""
    job = batch.read_namespaced_job_status(name, ns)
    for cond in job.status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def job_pod(v1: client.CoreV1Api, ns: str, job: str) -> client.V1Pod:
    """Waits for the Job's pod and returns it."""
    pods = wait_until(
        f"pod of job {job}",
        lambda: v1.list_namespaced_pod(ns, label_selector=f"job-name={job}").items,
    )
    return pods[0]


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_cluster_basics(cluster: KubeCluster, api: client.ApiClient) -> None:
    assert cluster.server.startswith("https://127.0.0.1:")
    status, body = cluster.request("/readyz")
    assert (status, body) == (200, "ok")
    assert cluster.kubeconfig_path.is_file()
    assert set(cluster.pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    v1 = client.CoreV1Api(api)
    assert v1.read_namespaced_service_account("default", "default").metadata.name == "default"
    version = client.VersionApi(api).get_code()
    assert version.git_version.startswith("v1.20")
    # The kubeconfig works on its own, as tether's scheduler will load it.
    from kubernetes import config as kconfig

    loaded = kconfig.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    with loaded:
        names = [ns.metadata.name for ns in client.CoreV1Api(loaded).list_namespace().items]
    assert "default" in names


def test_job_completes_with_logs(api: client.ApiClient) -> None:
    create_namespace(api, NS_OK)
    v1, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    lines_by_pod: dict[str, list[Any]] = {}

    def logs(pod: client.V1Pod) -> list[Any]:
        lines = lines_by_pod.setdefault(
            pod.metadata.name,
            [(old, "old line 1"), (old + timedelta(seconds=1), "old line 2")],
        )
        if len(lines) < 4:  # one new line each time the logs are read while running
            lines.append((datetime.now(timezone.utc), f"new line {len(lines) - 1}"))
        return list(lines)

    with FakeKubelet(
        api, namespace=NS_OK, behaviour=Behaviour.succeed(run_seconds=2.0), logs=logs
    ) as kubelet:
        node = v1.read_node(kubelet.node_name)
        assert node.status.addresses[0].address == "127.0.0.1"
        assert node.status.daemon_endpoints.kubelet_endpoint.port == kubelet.port

        batch.create_namespaced_job(NS_OK, make_job("ok"))
        pod = job_pod(v1, NS_OK, "ok")
        name = pod.metadata.name
        wait_until(
            "pod bound",
            lambda: v1.read_namespaced_pod(name, NS_OK).spec.node_name == kubelet.node_name,
        )
        running = wait_until(
            "pod Running",
            lambda: (p := v1.read_namespaced_pod(name, NS_OK)).status.phase == "Running" and p,
        )
        assert running.status.container_statuses[0].state.running is not None
        assert running.status.host_ip == "127.0.0.1"

        # follow=true while Running: the stream ends when the pod finishes.
        resp = v1.read_namespaced_pod_log(
            name, NS_OK, container="main", follow=True, _preload_content=False
        )
        followed = resp.data.decode() if hasattr(resp, "data") else resp.read().decode()
        assert "old line 1" in followed  # the stream ended with the pod

        wait_until(
            "pod Succeeded",
            lambda: v1.read_namespaced_pod(name, NS_OK).status.phase == "Succeeded",
        )
        done = v1.read_namespaced_pod(name, NS_OK)
        term = done.status.container_statuses[0].state.terminated
        assert term.exit_code == 0 and term.reason == "Completed"
        assert wait_until("job Complete", lambda: job_condition(batch, NS_OK, "ok")) == "Complete"
        record = kubelet.record(NS_OK, name)
        assert record is not None
        assert record.history[:4] == ["new", "bound", "running", "succeeded"]

        plain = v1.read_namespaced_pod_log(name, NS_OK).splitlines()
        assert plain[:2] == ["old line 1", "old line 2"]
        assert all(line.startswith("new line") for line in plain[2:]) and len(plain) == 4

        stamped = v1.read_namespaced_pod_log(name, NS_OK, timestamps=True).splitlines()
        ts_text, _, text = stamped[0].partition(" ")
        assert text == "old line 1"
        assert ts_text.endswith("Z") and len(ts_text) == len("2006-01-02T15:04:05.000000000Z")
        assert ts_text.startswith(old.strftime("%Y-%m-%dT%H:%M:%S"))

        recent = v1.read_namespaced_pod_log(name, NS_OK, since_seconds=600).splitlines()
        assert recent and all(line.startswith("new line") for line in recent)
        assert v1.read_namespaced_pod_log(name, NS_OK, tail_lines=1).splitlines() == plain[-1:]
        assert any("/containerLogs/infra-ok/" in r for r in kubelet.requests)

        batch.delete_namespaced_job("ok", NS_OK, propagation_policy="Background")
        wait_until(
            "job pods garbage-collected",
            lambda: not v1.list_namespaced_pod(NS_OK, label_selector="job-name=ok").items,
        )
    assert kubelet.errors == []


def test_failing_pod_fails_job(api: client.ApiClient) -> None:
    create_namespace(api, NS_FAIL)
    v1, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    with FakeKubelet(
        api,
        node_name="tether-node-fail",
        namespace=NS_FAIL,
        behaviour=Behaviour.fail(exit_code=3, run_seconds=0.3),
    ) as kubelet:
        batch.create_namespaced_job(NS_FAIL, make_job("bad", backoff_limit=0))
        pod = job_pod(v1, NS_FAIL, "bad")
        assert wait_until("job Failed", lambda: job_condition(batch, NS_FAIL, "bad")) == "Failed"
        done = v1.read_namespaced_pod(pod.metadata.name, NS_FAIL)
        assert done.status.phase == "Failed"
        term = done.status.container_statuses[0].state.terminated
        assert (term.exit_code, term.reason) == (3, "Error")
        job = batch.read_namespaced_job_status("bad", NS_FAIL)
        assert [c.reason for c in job.status.conditions if c.type == "Failed"] == [
            "BackoffLimitExceeded"
        ]
        batch.delete_namespaced_job("bad", NS_FAIL, propagation_policy="Background")
    assert kubelet.errors == []


def test_per_pod_policies(api: client.ApiClient) -> None:
    create_namespace(api, NS_POLICY)
    v1 = client.CoreV1Api(api)
    policies = {
        "ok": Behaviour.succeed(run_seconds=0.2),
        "replica-1": Behaviour.fail(exit_code=7, run_seconds=0.2),
        "pull": Behaviour.image_pull_error(),
        "backoff": Behaviour.image_pull_error(backoff=True),
        "nofit": Behaviour.unschedulable(),
        "crash": Behaviour.crash_loop(exit_code=2, restart_seconds=0.3),
        "forever": Behaviour.run_forever(),
    }

    def policy(pod: client.V1Pod) -> Behaviour:
        return policies[pod.metadata.labels["case"]]

    with FakeKubelet(
        api,
        node_name="tether-node-policy",
        namespace=NS_POLICY,
        label_selector="suite=policy",
        behaviour=policy,
        logs=lambda pod, container: [f"{pod.metadata.name}/{container}"],
    ) as kubelet:
        for case in policies:
            v1.create_namespaced_pod(
                NS_POLICY,
                client.V1Pod(
                    metadata=client.V1ObjectMeta(
                        name=case, labels={"suite": "policy", "case": case}
                    ),
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[client.V1Container(name="c", image="img:" + case)],
                    ),
                ),
            )

        def pod(name: str) -> client.V1Pod:
            return v1.read_namespaced_pod(name, NS_POLICY)

        wait_until("ok Succeeded", lambda: pod("ok").status.phase == "Succeeded")
        wait_until("replica-1 Failed", lambda: pod("replica-1").status.phase == "Failed")
        assert pod("replica-1").status.container_statuses[0].state.terminated.exit_code == 7

        for name, reason in (("pull", "ErrImagePull"), ("backoff", "ImagePullBackOff")):
            kubelet.wait_for_state(NS_POLICY, name, "waiting")
            p = pod(name)
            assert p.status.phase == "Pending"
            assert p.status.container_statuses[0].state.waiting.reason == reason
            with pytest.raises(ApiException) as err:
                v1.read_namespaced_pod_log(name, NS_POLICY)
            assert err.value.status == 400

        kubelet.wait_for_state(NS_POLICY, "nofit", "unschedulable")
        nofit = pod("nofit")
        assert nofit.spec.node_name is None and nofit.status.phase == "Pending"
        cond = next(c for c in nofit.status.conditions if c.type == "PodScheduled")
        assert (cond.status, cond.reason) == ("False", "Unschedulable")

        kubelet.wait_for_state(NS_POLICY, "crash", "crash_loop")
        crash = wait_until(
            "restartCount >= 2",
            lambda: (p := pod("crash")).status.container_statuses[0].restart_count >= 2 and p,
        )
        cs = crash.status.container_statuses[0]
        assert cs.state.waiting.reason == "CrashLoopBackOff"
        assert cs.last_state.terminated.exit_code == 2

        kubelet.wait_for_state(NS_POLICY, "forever", "running")
        assert v1.read_namespaced_pod_log("forever", NS_POLICY) == "forever/c\n"

        # A Running pod bound to our node is deleted gracefully: the kubelet confirms.
        v1.delete_namespaced_pod("forever", NS_POLICY)
        wait_until(
            "forever deleted",
            lambda: (
                not v1.list_namespaced_pod(NS_POLICY, field_selector="metadata.name=forever").items
            ),
            timeout=30,
        )
        v1.delete_collection_namespaced_pod(NS_POLICY, grace_period_seconds=0)
    assert kubelet.errors == []


def test_process_mode_runs_the_pod_command(api: client.ApiClient, tmp_path: Any) -> None:
    """run_process(): the container command really runs; its output is the log, its exit code
    ends the pod, and deleting a running pod stops the process."""
    import sys

    from tests.e2e.infra.kubelet_exec import PodExecutor

    ns = "infra-process"
    create_namespace(api, ns)
    v1 = client.CoreV1Api(api)
    marker = tmp_path / "stopped"

    def pod(name: str, code: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "host/python:1", "command": [sys.executable, "-c", code],
                "env": [{"name": "WHO", "value": name}],
            }]},
        }  # fmt: skip

    with FakeKubelet(api, node_name="infra-process-node", namespace=ns,
                     behaviour=Behaviour.run_process(), executor=PodExecutor()):  # fmt: skip
        exits = "import os; print('hi', os.environ['WHO']); exit(3)"
        v1.create_namespaced_pod(ns, pod("exits", exits))
        code = (
            "import signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (open({str(marker)!r}, 'w'), sys.exit(0)))\n"
            "print('up', flush=True)\n"
            "time.sleep(3600)\n"
        )
        v1.create_namespaced_pod(ns, pod("sleeps", code))

        def terminated() -> Any:
            st = v1.read_namespaced_pod_status("exits", ns).status
            cs = st.container_statuses or []
            return st.phase == "Failed" and cs and cs[0].state.terminated

        term = wait_until("the pod to fail", terminated)
        assert term.exit_code == 3
        assert v1.read_namespaced_pod_log("exits", ns).splitlines() == ["hi exits"]

        wait_until("the second pod's output", lambda: "up" in _log_or_empty(v1, ns, "sleeps"))
        v1.delete_namespaced_pod("sleeps", ns)
        wait_until("SIGTERM to reach the process", marker.exists)


def _log_or_empty(v1: client.CoreV1Api, ns: str, name: str) -> str:
    try:
        return str(v1.read_namespaced_pod_log(name, ns))
    except ApiException:
        return ""
