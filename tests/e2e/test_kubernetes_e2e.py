"""The ``kubernetes`` scheduler on a real single-node cluster: lifecycle, logs, retries, ids.

Pods are real containers (busybox under containerd, ``tests/e2e/infra/kube_node.py``):
exit codes, termination messages, image pull failures, the scheduler's reasons, crash-loop
back-off, logs and their timestamps, and the Job controller's retries are the runtime's and
the control plane's own. Programs that must behave differently on a retry keep a marker in a
``hostPath`` directory shared with the test (the node is this host).

What only the test kubelet (``tests/e2e/infra/kubelet.py``) can do (node loss, evictions with
a given message, a GPU node) is tested in ``test_kubernetes_failure_causes_e2e.py`` and
``test_watch_hub_kube.py``, each test saying so.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_images import BUSYBOX_IMAGE
from tests.e2e.infra.kube_node_fixtures import RealKube
from tether.runner import Runner
from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError
from tether.schedulers.kubernetes.scheduler import create_scheduler
from tether.specs import (
    AppDef,
    AppState,
    AppStatus,
    BindMount,
    Resource,
    RetryPolicy,
    Role,
    macros,
)
from tether.specs.overlays import set_overlay

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FOREVER = "trap 'exit 143' TERM; sleep 3600 & wait"
"""A program that runs until it is stopped and ends at once on SIGTERM (a ``sleep`` as the
container's pid 1 would ignore it and hold the pod for the whole grace period)."""


@pytest.fixture
def kube_api(real_kube: RealKube) -> Any:
    """The real cluster's admin client."""
    return real_kube.api


@pytest.fixture
def ns(kube_api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "t-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    yield name
    # the node has two cores: no pod of a finished test keeps running
    client.CoreV1Api(kube_api).delete_collection_namespaced_pod(name, grace_period_seconds=0)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory the pods see at the same path (``hostPath``): markers of earlier tries."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    return d


@pytest.fixture
def runner(kube_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as r:
        yield r


def cfg(ns: str, **extra: Any) -> dict[str, Any]:
    """Run options: the node's imported images (nothing can be pulled here)."""
    return {"namespace": ns, "image_pull_policy": "Never", **extra}


def app(name: str = "e2e", n: int = 1, script: str = f"echo replica {macros.replica_id}",
        shared: Path | None = None, **role: Any) -> AppDef:  # fmt: skip
    """An app of one role running ``sh -c script`` in busybox (``$S``: the shared dir)."""
    role.setdefault("image", BUSYBOX_IMAGE)
    if shared is not None:
        role["env"] = {"S": str(shared), **role.get("env", {})}
        role["mounts"] = [BindMount(src_path=str(shared), dst_path=str(shared))]
    return AppDef(name, roles=[Role("worker", entrypoint="sh", args=["-c", script],
                                    num_replicas=n, **role)])  # fmt: skip


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def status(runner: Runner, handle: str) -> AppStatus:
    st = runner.status(handle)
    assert st is not None, handle
    return st


def objects(kube_api: Any, ns: str, app_id: str) -> dict[str, list[str]]:
    sel = f"tether.dev/app-id={app_id.split(':', 1)[1]}"
    v1, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    return {
        "jobs": [j.metadata.name for j in batch.list_namespaced_job(ns, label_selector=sel).items],
        "pods": [p.metadata.name for p in v1.list_namespaced_pod(ns, label_selector=sel).items],
        "services": [
            s.metadata.name for s in v1.list_namespaced_service(ns, label_selector=sel).items
        ],
    }


# ---- lifecycle -------------------------------------------------------------------------------
def test_submit_runs_to_success(runner: Runner, ns: str, kube_api: Any,
                                real_kube: RealKube) -> None:  # fmt: skip
    script = f"sleep 2; echo replica {macros.replica_id}"
    handle = runner.run(app("ok", n=2, script=script), "kubernetes", cfg(ns))
    app_id = handle.split("/", 3)[-1]
    assert app_id.startswith(f"{ns}:ok-")
    seen: list[AppState] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        st = status(runner, handle)
        if not seen or seen[-1] != st.state:
            seen.append(st.state)
        if st.is_terminal():
            break
        time.sleep(0.2)
    assert seen[-1] == AppState.SUCCEEDED, seen
    assert AppState.RUNNING in seen and seen.index(AppState.RUNNING) < len(seen) - 1
    assert set(seen) <= {AppState.PENDING, AppState.RUNNING, AppState.SUCCEEDED}
    final = status(runner, handle)
    assert [(r.id, r.state) for r in final.roles[0].replicas] == [
        (0, AppState.SUCCEEDED), (1, AppState.SUCCEEDED)
    ]  # fmt: skip
    assert final.roles[0].replicas[0].hostname == real_kube.node.name
    # the container's output, through the kubelet
    assert list(runner.log_lines(handle, "worker", 1)) == ["replica 1\n"]
    # stable identity: hostname + subdomain under the headless Service, rank 0's DNS name
    objs = objects(kube_api, ns, app_id)
    name = app_id.split(":", 1)[1]
    assert objs["services"] == [name] and len(objs["jobs"]) == 2
    pod = client.CoreV1Api(kube_api).list_namespaced_pod(
        ns, label_selector=f"tether.dev/app-id={name},tether.dev/replica-id=1"
    ).items[0]
    assert (pod.spec.hostname, pod.spec.subdomain) == (f"{name}-worker-1", name)
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["TETHER_RANK0_HOST"] == f"{name}-worker-0.{name}.{ns}.svc.cluster.local"
    assert env["TETHER_REPLICA_ID"] == "1" and pod.spec.containers[0].args is None
    assert pod.spec.containers[0].command == ["sh", "-c", "sleep 2; echo replica 1"]
    described = runner.describe(handle)
    assert described is not None and described.roles[0].num_replicas == 2


def test_cli_runs_a_job_on_the_real_node_as_docs_show(real_kube: RealKube,
                                                     tmp_path: Path) -> None:  # fmt: skip
    """The command ``docs/schedulers.md`` gives for the cluster started by hand."""
    env = dict(os.environ, KUBECONFIG=str(real_kube.cluster.kubeconfig_path),
               TETHER_STATE_DIR=str(tmp_path / "state"))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", "-s", "kubernetes",
         "-cfg", "image_pull_policy=Never", "--log", "utils.echo",
         "--image", BUSYBOX_IMAGE, "--msg", "hello from a real pod"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hello from a real pod" in proc.stdout and "SUCCEEDED" in proc.stdout, proc.stdout


def test_failure_reports_exit_code_and_reason(runner: Runner, ns: str) -> None:
    """The exit code and the container's termination message (what it wrote to
    ``/dev/termination-log``) come from the runtime."""
    script = "printf 'out of cheese' > /dev/termination-log; exit 3"
    handle = runner.run(app("bad", script=script), "kubernetes", cfg(ns))
    # the pod watch wakes the wait up; a wait left to its 600 s poll would outlast the
    # suite's 300 s test timeout and fail the test
    final = runner.wait(handle, wait_interval=600, timeout=900)
    assert final is not None and final.state == AppState.FAILED
    assert "worker[0]: exit code 3 (Error: out of cheese)" in final.msg
    rep = final.roles[0].replicas[0]
    assert rep.exit_code == 3 and rep.state == AppState.FAILED


def test_pending_reasons_image_pull_unschedulable_crash_loop(
    runner: Runner, ns: str, kube_api: Any
) -> None:
    """The kubelet's image pull failure (a registry that refuses connections), the real
    scheduler's reason, and the kubelet's crash-loop back-off."""
    missing = "127.0.0.1:9/nope/missing:1"  # nothing listens there: the pull fails at once
    pulled = {"namespace": ns, "image_pull_policy": "Always"}
    h_pull = runner.run(app("pull", image=missing), "kubernetes", pulled)
    h_fast = runner.run(app("pullfast", image=missing), "kubernetes",
                        {**pulled, "image_pull_timeout": 1})  # fmt: skip
    big = Resource(cpu=1, gpu=16, memMB=1024)
    h_nofit = runner.run(app("nofit", resource=big), "kubernetes", cfg(ns))
    # a pod overlay may ask the kubelet to restart the container in place (the Job's
    # backoffLimit, max_retries here, bounds the restarts)
    crash = app("crash", script="exit 2", max_retries=5, retry_policy=RetryPolicy.REPLICA)
    set_overlay(crash.roles[0], "kubernetes", "V1Pod", {"spec": {"restartPolicy": "OnFailure"}})
    h_crash = runner.run(crash, "kubernetes", cfg(ns))

    st = wait_until("ErrImagePull reported", lambda: (s := status(runner, h_pull)).msg and s)
    assert st.state == AppState.PENDING and "ErrImagePull" in st.msg and "nope/missing:1" in st.msg

    st = wait_until("pull failure is final", lambda: (s := status(runner, h_fast)).is_terminal()
                    and s)  # fmt: skip
    assert st.state == AppState.FAILED and "ErrImagePull" in st.msg
    assert "image_pull_timeout=1s" in st.msg
    # status is a read; the reconcile step (Runner.wait and the adapters' pollers call it)
    # stops the app, and the reason is kept after its pod is gone
    runner.reconcile(h_fast)
    name = h_fast.rsplit(":", 1)[1]
    v1 = client.CoreV1Api(kube_api)
    pods = wait_until("pull pod stopped", lambda: [
        p for p in v1.list_namespaced_pod(ns, label_selector=f"tether.dev/app-id={name}").items
        if p.metadata.deletion_timestamp])  # fmt: skip
    # this kubelet takes about a minute to let go of a pod stuck pulling: remove it at once
    v1.delete_namespaced_pod(pods[0].metadata.name, ns, grace_period_seconds=0)
    wait_until("pull pod removed", lambda: not v1.list_namespaced_pod(
        ns, label_selector=f"tether.dev/app-id={name}").items)  # fmt: skip
    again = status(runner, h_fast)
    assert again.state == AppState.FAILED and "ErrImagePull" in again.msg

    st = wait_until("unschedulable reported", lambda: (s := status(runner, h_nofit)).msg and s)
    assert st.state == AppState.PENDING
    assert "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in st.msg

    st = wait_until("crash loop reported",
                    lambda: "CrashLoopBackOff" in (s := status(runner, h_crash)).msg and s)
    assert st.state == AppState.RUNNING and "last exit code 2" in st.msg
    for h in (h_pull, h_nofit, h_crash):
        runner.cancel(h)


# ---- logs ------------------------------------------------------------------------------------
def runtime_times(kube_api: Any, ns: str, app_id: str) -> dict[str, datetime]:
    """Each log line of the app's pod with the time the runtime stamped on it."""
    name = app_id.split(":", 1)[1]
    pod = client.CoreV1Api(kube_api).list_namespaced_pod(
        ns, label_selector=f"tether.dev/app-id={name}").items[0]
    text = client.CoreV1Api(kube_api).read_namespaced_pod_log(
        pod.metadata.name, ns, timestamps=True)
    times = {}
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        times[rest] = datetime.fromisoformat(stamp)
    return times


def test_logs_lines_since_until_and_tailing(runner: Runner, ns: str, kube_api: Any) -> None:
    script = ("echo first line; sleep 1.5; echo second line; sleep 1.5; echo third line; "
              "for i in 1 2 3 4 5; do sleep 0.4; echo live $i; done")  # fmt: skip
    handle = runner.run(app("logs", script=script), "kubernetes", cfg(ns))
    wait_until("running", lambda: status(runner, handle).state == AppState.RUNNING)

    tailed = list(runner.log_lines(handle, "worker", 0, should_tail=True))  # ends with the pod
    assert status(runner, handle).state == AppState.SUCCEEDED
    assert tailed == ["first line\n", "second line\n", "third line\n",
                      *[f"live {i}\n" for i in range(1, 6)]]  # fmt: skip

    everything = list(runner.log_lines(handle, "worker", 0))
    assert everything == tailed
    at = runtime_times(kube_api, ns, handle.split("/", 3)[-1])
    first, second, third = at["first line"], at["second line"], at["third line"]
    window = list(runner.log_lines(handle, "worker", 0, since=first + (second - first) / 2,
                                   until=second + (third - second) / 2))  # fmt: skip
    assert window == ["second line\n"]
    naive_local = (second + (third - second) / 2).astimezone().replace(tzinfo=None)
    later = list(runner.log_lines(handle, "worker", 0, since=naive_local))
    assert later[0] == "third line\n" and len(later) == len(everything) - 2
    assert list(runner.log_lines(handle, "worker", 0, regex="^live")) == [
        x for x in everything if x.startswith("live")
    ]
    with pytest.raises(ValueError, match="has no role 'nope'"):
        list(runner.log_lines(handle, "nope", 0))
    with pytest.raises(ValueError, match="has replicas \\[0\\], not 3"):
        list(runner.log_lines(handle, "worker", 3))


# ---- stop ------------------------------------------------------------------------------------
def test_cancel_keeps_the_record(runner: Runner, ns: str, kube_api: Any) -> None:
    handle = runner.run(app("forever", n=2, script=FOREVER), "kubernetes", cfg(ns))
    wait_until("running", lambda: status(runner, handle).state == AppState.RUNNING)
    runner.cancel(handle)
    st = status(runner, handle)
    assert st.state == AppState.CANCELLED and st.msg == "cancelled by the user"
    app_id = handle.split("/", 3)[-1]
    wait_until("pods stopped", lambda: not objects(kube_api, ns, app_id)["pods"])
    objs = objects(kube_api, ns, app_id)
    assert len(objs["jobs"]) == 2 and objs["services"]  # the record is kept
    runner.cancel(handle)  # idempotent
    assert status(runner, handle).state == AppState.CANCELLED
    final = runner.wait(handle, wait_interval=1, timeout=5)
    assert final is not None and final.state == AppState.CANCELLED


def test_delete_removes_everything(runner: Runner, ns: str, kube_api: Any) -> None:
    handle = runner.run(app("gone", n=3, script=FOREVER), "kubernetes", cfg(ns))
    wait_until("running", lambda: status(runner, handle).state == AppState.RUNNING)
    app_id = handle.split("/", 3)[-1]
    assert len(objects(kube_api, ns, app_id)["pods"]) == 3
    runner.delete(handle)
    assert runner.status(handle) is None
    wait_until("all objects gone",
               lambda: objects(kube_api, ns, app_id) == {"jobs": [], "pods": [], "services": []})
    runner.delete(handle)  # idempotent


def test_list(runner: Runner, ns: str) -> None:
    h1 = runner.run(app("one"), "kubernetes", cfg(ns))
    h2 = runner.run(app("two", n=2), "kubernetes", cfg(ns), job_key="prefect-42")
    runner.wait(h1, wait_interval=0.5, timeout=90)
    runner.wait(h2, wait_interval=0.5, timeout=90)
    sched = create_scheduler("tether", client=runner._scheduler("kubernetes")._client)
    listed = {a.app_id: a for a in sched.list({"namespace": ns})}
    ids = [h.split("/", 3)[-1] for h in (h1, h2)]
    assert sorted(listed) == sorted(ids)
    assert listed[ids[0]].name == "one" and listed[ids[0]].job_key is None
    assert listed[ids[1]].name == "two" and listed[ids[1]].job_key == "prefect-42"
    assert {a.state for a in listed.values()} == {AppState.SUCCEEDED}
    assert [a.app_id for a in sched.find_jobs("prefect-42")] == [ids[1]]
    assert sched.find_jobs("nobody") == []


# ---- retries ---------------------------------------------------------------------------------
def tries(shared: Path, name: str = "tries") -> int:
    """How many containers the program ran in (each appends a line)."""
    path = shared / name
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_replica_retry_policy_lets_kubernetes_retry(runner: Runner, ns: str,
                                                    shared: Path) -> None:  # fmt: skip
    """The Job controller replaces the failed pod (its backoffLimit is max_retries)."""
    script = ('echo x >> "$S/tries"; [ -e "$S/failed" ] && { sleep 2; exit 0; }; '
              'touch "$S/failed"; exit 9')  # fmt: skip
    handle = runner.run(
        app("replica", script=script, shared=shared, max_retries=2,
            retry_policy=RetryPolicy.REPLICA), "kubernetes", cfg(ns),
    )  # fmt: skip
    retried = wait_until(
        "the retried pod runs",
        lambda: (s := status(runner, handle)).num_restarts == 1 and s.state == AppState.RUNNING
        and s,
    )  # fmt: skip
    assert retried.roles[0].replicas[0].state == AppState.RUNNING
    final = runner.wait(handle, wait_interval=1, timeout=120)
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1 and tries(shared) == 2


def test_application_retry_policy_restarts_the_app(runner: Runner, ns: str, kube_api: Any,
                                                   shared: Path) -> None:  # fmt: skip
    script = ('if [ "$TETHER_REPLICA_ID" = 1 ] && [ ! -e "$S/r1" ]; then '
              'touch "$S/r1"; sleep 0.5; exit 4; fi; sleep 1')  # fmt: skip
    handle = runner.run(
        app("apprestart", n=2, script=script, shared=shared, max_retries=1,
            retry_policy=RetryPolicy.APPLICATION), "kubernetes", cfg(ns),
    )  # fmt: skip
    final = runner.wait(handle, wait_interval=0.5, timeout=120)
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1
    jobs = sorted(objects(kube_api, ns, handle.split("/", 3)[-1])["jobs"])
    name = handle.rsplit(":", 1)[1]
    assert jobs == [f"{name}-worker-0", f"{name}-worker-0-r1", f"{name}-worker-1",
                    f"{name}-worker-1-r1"]  # fmt: skip


def test_application_retries_exhausted_fail(runner: Runner, ns: str, shared: Path) -> None:
    script = 'echo x >> "$S/tries"; exit 6'
    handle = runner.run(app("exhaust", script=script, shared=shared, max_retries=1),
                        "kubernetes", cfg(ns))  # fmt: skip
    final = runner.wait(handle, wait_interval=0.5, timeout=120)
    assert final is not None and final.state == AppState.FAILED
    assert final.num_restarts == 1 and "exit code 6" in final.msg
    assert tries(shared) == 2


def test_two_watchers_reconciling_at_once_restart_once(
    runner: Runner, ns: str, kube_api: Any, shared: Path
) -> None:
    """Two watchers (two schedulers, as two processes would have) reconcile one failure at
    once: both read the app before either acts, so both plan the restart; one creates the
    next attempt, the other's create gets 409 and is left alone. The role restarts once."""
    script = 'echo x >> "$S/tries"; [ -e "$S/failed" ] && exit 0; touch "$S/failed"; exit 3'
    handle = runner.run(app("twowatch", script=script, shared=shared, max_retries=1,
                            retry_policy=RetryPolicy.ROLE), "kubernetes", cfg(ns))  # fmt: skip
    app_id = handle.split("/", 3)[-1]
    name = app_id.split(":", 1)[1]
    batch = client.BatchV1Api(kube_api)
    wait_until("the first attempt failed (native state)", lambda: (
        batch.read_namespaced_job_status(f"{name}-worker-0", ns).status.failed or 0) >= 1)

    # both watchers finish reading before either writes (the interleaving that needs 409)
    with pytest.MonkeyPatch.context() as mp:
        barrier = threading.Barrier(2, timeout=60)
        watchers = [create_scheduler("tether", client=kube_api) for _ in range(2)]
        for w in watchers:
            def fetch(ns_: str, name_: str, real: Any = w._fetch) -> Any:
                view = real(ns_, name_)
                barrier.wait()
                return view

            mp.setattr(w, "_fetch", fetch)
        creates: list[int] = []  # HTTP status of each create of the next attempt
        real_create = KubeApi.create

        def create(self: KubeApi, path: str, body: Any) -> Any:
            try:
                out = real_create(self, path, body)
            except KubernetesApiError as e:
                creates.append(e.status or 0)
                raise
            creates.append(201)
            return out

        mp.setattr(KubeApi, "create", create)
        errors: list[BaseException] = []

        def watch(w: Any) -> None:
            try:
                w.reconcile(app_id)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=watch, args=(w,)) for w in watchers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == [] and not any(t.is_alive() for t in threads)
        assert sorted(creates) == [201, 409], creates
        assert sorted(objects(kube_api, ns, app_id)["jobs"]) == [
            f"{name}-worker-0", f"{name}-worker-0-r1"]
    final = runner.wait(handle, wait_interval=0.5, timeout=120)
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1 and tries(shared) == 2


# ---- job identity ----------------------------------------------------------------------------
def test_idempotent_submit_with_job_key(runner: Runner, ns: str, kube_api: Any,
                                        real_kube: RealKube) -> None:  # fmt: skip
    key = "airflow-" + hashlib.sha256(ns.encode()).hexdigest()[:32]
    forever = app("idem", n=2, script=FOREVER)
    first = runner.run(forever, "kubernetes", cfg(ns), job_key=key)
    second = runner.run(forever, "kubernetes", cfg(ns), job_key=key)
    assert second == first
    # a fresh runner (another process, e.g. a retried orchestrator task) finds it too
    kubeconfig = str(real_kube.cluster.kubeconfig_path)
    with Runner(scheduler_params={"kubernetes": {"kubeconfig": kubeconfig}}) as other:
        assert other.run(forever, "kubernetes", cfg(ns), job_key=key) == first
    # the lookup is the Runner's; the scheduler records the key so find_jobs finds the job
    sched = create_scheduler("tether", client=kube_api)
    assert [j.app_id for j in sched.find_jobs(key)] == [first.split("/", 3)[-1]]
    assert len(objects(kube_api, ns, first.split("/", 3)[-1])["jobs"]) == 2
    all_jobs = client.BatchV1Api(kube_api).list_namespaced_job(ns).items
    assert len(all_jobs) == 2
    # once cancelled, the same key submits a new job (a retry)
    runner.cancel(first)
    third = runner.run(forever, "kubernetes", cfg(ns), job_key=key)
    assert third != first
    runner.cancel(third)

# ---- gang options against their CRDs ---------------------------------------------------------
def install_crd(kube_api: Any, group: str, kind: str, plural: str, version: str) -> None:
    ext = client.ApiextensionsV1Api(kube_api)
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [{
                "name": version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}},
            }],
        },
    }  # fmt: skip
    try:
        ext.create_custom_resource_definition(body)
    except client.ApiException as e:
        if e.status != 409:
            raise
    wait_until(f"CRD {plural}.{group} established", lambda: any(
        c.type == "Established" and c.status == "True"
        for c in ext.read_custom_resource_definition(f"{plural}.{group}").status.conditions or []
    ))  # fmt: skip
    wait_until(f"{plural}.{group} served", lambda: KubeApi(kube_api).list(
        f"/apis/{group}/{version}/namespaces/default/{plural}") is not None)  # fmt: skip


def test_gang_options_against_their_crds(runner: Runner, ns: str, kube_api: Any) -> None:
    api = KubeApi(kube_api)
    ext = client.ApiextensionsV1Api(kube_api)
    installed = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    if "jobs.batch.volcano.sh" not in installed:
        with pytest.raises(KubernetesApiError, match="is Volcano installed"):
            runner.run(app("novc"), "kubernetes", cfg(ns, gang="volcano"))
    install_crd(kube_api, "batch.volcano.sh", "Job", "jobs", "v1alpha1")
    install_crd(kube_api, "bus.volcano.sh", "Command", "commands", "v1alpha1")
    install_crd(kube_api, "mcad.ibm.com", "AppWrapper", "appwrappers", "v1beta1")

    # volcano: one Volcano Job; the test plays the Volcano controller's status
    h_vc = runner.run(app("vc", n=2), "kubernetes", cfg(ns, gang="volcano", queue="research"))
    vc_name = h_vc.rsplit(":", 1)[1]
    vc_path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/{vc_name}"
    vcjob = api.get(vc_path)
    assert vcjob is not None and vcjob["spec"]["queue"] == "research"
    assert status(runner, h_vc).state == AppState.PENDING
    described = runner.describe(h_vc)
    assert described is not None and described.roles[0].num_replicas == 2
    api.merge_patch(vc_path, {"status": {"state": {"phase": "Running"}}})
    assert status(runner, h_vc).state == AppState.RUNNING
    runner.cancel(h_vc)
    assert status(runner, h_vc).state == AppState.CANCELLED
    commands = api.list(f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands")
    assert [(c["action"], c["target"]["name"]) for c in commands] == [("AbortJob", vc_name)]
    runner.delete(h_vc)
    assert api.get(vc_path) is None and runner.status(h_vc) is None
    wait_until("command deleted", lambda: not api.list(
        f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands"))  # fmt: skip

    # appwrapper: MCAD (played by the test) creates the wrapped objects when it dispatches
    h_aw = runner.run(app("aw", n=2), "kubernetes", cfg(ns, gang="appwrapper"))
    aw_name = h_aw.rsplit(":", 1)[1]
    aw_path = f"/apis/mcad.ibm.com/v1beta1/namespaces/{ns}/appwrappers/{aw_name}"
    st = status(runner, h_aw)
    assert st.state == AppState.PENDING and "waiting for MCAD" in st.msg
    aw = api.get(aw_path)
    assert aw is not None
    for item in aw["spec"]["resources"]["GenericItems"]:
        obj = item["generictemplate"]
        kind_path = "services" if obj["kind"] == "Service" else "jobs"
        prefix = "/api/v1" if obj["kind"] == "Service" else "/apis/batch/v1"
        api.create(f"{prefix}/namespaces/{ns}/{kind_path}", obj)
    final = runner.wait(h_aw, wait_interval=0.5, timeout=60)
    assert final is not None and final.state == AppState.SUCCEEDED
    runner.delete(h_aw)
    wait_until("appwrapper objects gone", lambda: api.get(aw_path) is None and objects(
        kube_api, ns, h_aw.split("/", 3)[-1]) == {"jobs": [], "pods": [], "services": []})

    # kueue: the queue label (v1.20 has no Job.spec.suspend, so the Jobs start at once)
    h_kq = runner.run(app("kq"), "kubernetes", cfg(ns, gang="kueue", queue="team-a"))
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(
        ns, label_selector=f"tether.dev/app-id={h_kq.rsplit(':', 1)[1]}").items
    assert [j.metadata.labels["kueue.x-k8s.io/queue-name"] for j in jobs] == ["team-a"]
    final = runner.wait(h_kq, wait_interval=0.5, timeout=60)
    assert final is not None and final.state == AppState.SUCCEEDED
