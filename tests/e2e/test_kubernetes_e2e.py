"""The ``kubernetes`` scheduler against a real kube-apiserver, etcd and kube-controller-manager.

A test kubelet (``tests/e2e/infra/kubelet.py``) binds the pods, drives their phases per a
behaviour chosen by the pod's ``e2e-case`` label, and serves their logs.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import KubeCluster, create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tether.runner import Runner
from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError
from tether.schedulers.kubernetes.scheduler import create_scheduler
from tether.specs import (
    AppDef,
    AppState,
    AppStatus,
    Resource,
    RetryPolicy,
    Role,
    macros,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SUITE = "kubernetes-scheduler"
CASE = "e2e-case"
_counter = itertools.count()


class Script:
    """What the test kubelet does with each pod, by the pod's ``e2e-case`` label."""

    def __init__(self) -> None:
        self.behaviours: dict[str, Callable[[client.V1Pod], Behaviour]] = {}
        self.logs: dict[str, Callable[[client.V1Pod], list[Any]]] = {}
        self.lock = threading.Lock()

    def policy(self, pod: client.V1Pod) -> Behaviour:
        fn = self.behaviours.get(pod.metadata.labels.get(CASE, ""))
        return fn(pod) if fn else Behaviour.succeed(run_seconds=0.5)

    def lines(self, pod: client.V1Pod) -> list[Any]:
        fn = self.logs.get(pod.metadata.labels.get(CASE, ""))
        return fn(pod) if fn else [f"hello from {pod.metadata.name}"]


@pytest.fixture(scope="module")
def script() -> Script:
    return Script()


@pytest.fixture(scope="module")
def kubelet(kube_api: Any, script: Script) -> Iterator[FakeKubelet]:
    with FakeKubelet(
        kube_api,
        node_name="tether-sched-node",
        label_selector=f"e2e-suite={SUITE}",
        behaviour=script.policy,
        logs=script.lines,
    ) as kl:
        yield kl


@pytest.fixture
def ns(kube_api: Any, request: pytest.FixtureRequest) -> str:
    name = "t-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    return name


@pytest.fixture
def runner(kube_api: Any, kubelet: FakeKubelet, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as r:
        yield r


def cfg(ns: str, case: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": ns, "labels": {"e2e-suite": SUITE, CASE: case}, **extra}


def new_case(script: Script, behaviour: Callable[[client.V1Pod], Behaviour] | Behaviour,
             logs: Callable[[client.V1Pod], list[Any]] | None = None) -> str:  # fmt: skip
    case = f"c{next(_counter)}"
    script.behaviours[case] = behaviour if callable(behaviour) else (lambda _p: behaviour)
    if logs is not None:
        script.logs[case] = logs
    return case


def app(name: str = "e2e", n: int = 1, **role: Any) -> AppDef:
    role.setdefault("image", "busybox:1.36")
    role.setdefault("entrypoint", "echo")
    role.setdefault("args", ["replica", macros.replica_id])
    return AppDef(name, roles=[Role("worker", num_replicas=n, **role)])


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
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
def test_submit_runs_to_success(runner: Runner, script: Script, ns: str, kube_api: Any) -> None:
    case = new_case(script, Behaviour.succeed(run_seconds=2.0))
    handle = runner.run(app("ok", n=2), "kubernetes", cfg(ns, case))
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
    assert final.roles[0].replicas[0].hostname == "tether-sched-node"
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
    assert pod.spec.containers[0].command == ["echo", "replica", "1"]
    described = runner.describe(handle)
    assert described is not None and described.roles[0].num_replicas == 2


def test_failure_reports_exit_code_and_reason(runner: Runner, script: Script, ns: str) -> None:
    case = new_case(script, Behaviour.fail(exit_code=3, run_seconds=0.3, message="out of cheese"))
    handle = runner.run(app("bad"), "kubernetes", cfg(ns, case))
    t0 = time.monotonic()
    final = runner.wait(handle, wait_interval=600, timeout=900)
    assert time.monotonic() - t0 < 300  # the pod watch wakes the wait up, not the 600 s poll
    assert final is not None and final.state == AppState.FAILED
    assert "worker[0]: exit code 3 (Error: out of cheese)" in final.msg
    rep = final.roles[0].replicas[0]
    assert rep.exit_code == 3 and rep.state == AppState.FAILED


def test_pending_reasons_image_pull_unschedulable_crash_loop(
    runner: Runner, script: Script, ns: str, kube_api: Any
) -> None:
    pull = new_case(script, Behaviour.image_pull_error())
    h_pull = runner.run(app("pull", image="nope/missing:1"), "kubernetes", cfg(ns, pull))
    h_fast = runner.run(app("pullfast", image="nope/missing:1"), "kubernetes",
                        cfg(ns, pull, image_pull_timeout=1))  # fmt: skip
    nofit = new_case(script, Behaviour.unschedulable())
    big = Resource(cpu=1, gpu=16, memMB=1024)
    h_nofit = runner.run(app("nofit", resource=big), "kubernetes", cfg(ns, nofit))
    crash = new_case(script, Behaviour.crash_loop(exit_code=2, restart_seconds=0.3))
    h_crash = runner.run(app("crash"), "kubernetes", cfg(ns, crash))

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
    wait_until("pull pod removed", lambda: not client.CoreV1Api(kube_api).list_namespaced_pod(
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
def test_logs_lines_since_until_and_tailing(runner: Runner, script: Script, ns: str) -> None:
    base = datetime.now(timezone.utc) - timedelta(hours=1)
    produced: dict[str, list[Any]] = {}

    def logs(pod: client.V1Pod) -> list[Any]:
        lines = produced.setdefault(pod.metadata.name, [
            (base, "first line"), (base + timedelta(minutes=10), "second line"),
            (base + timedelta(minutes=20), "third line"),
        ])  # fmt: skip
        if len(lines) < 8:  # the pod keeps writing while it runs
            lines.append((datetime.now(timezone.utc), f"live {len(lines) - 3}"))
        return list(lines)

    case = new_case(script, Behaviour.succeed(run_seconds=3.0), logs)
    handle = runner.run(app("logs"), "kubernetes", cfg(ns, case))
    wait_until("running", lambda: status(runner, handle).state == AppState.RUNNING)

    tailed = list(runner.log_lines(handle, "worker", 0, should_tail=True))  # ends with the pod
    assert status(runner, handle).state == AppState.SUCCEEDED
    assert tailed[:3] == ["first line\n", "second line\n", "third line\n"]
    assert len(tailed) >= 5 and all(line.endswith("\n") and line.count("\n") == 1
                                    for line in tailed)  # fmt: skip
    assert len(set(tailed)) == len(tailed)  # reconnects do not repeat lines

    everything = list(runner.log_lines(handle, "worker", 0))
    assert everything[:3] == tailed[:3] and len(everything) >= len(tailed)
    window = list(runner.log_lines(
        handle, "worker", 0, since=base + timedelta(minutes=5), until=base + timedelta(minutes=15)
    ))  # fmt: skip
    assert window == ["second line\n"]
    naive_local = (base + timedelta(minutes=15)).astimezone().replace(tzinfo=None)
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
def test_cancel_keeps_the_record(runner: Runner, script: Script, ns: str, kube_api: Any) -> None:
    case = new_case(script, Behaviour.run_forever())
    handle = runner.run(app("forever", n=2), "kubernetes", cfg(ns, case))
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


def test_delete_removes_everything(runner: Runner, script: Script, ns: str,
                                   kube_api: Any) -> None:  # fmt: skip
    case = new_case(script, Behaviour.run_forever())
    handle = runner.run(app("gone", n=3), "kubernetes", cfg(ns, case))
    wait_until("running", lambda: status(runner, handle).state == AppState.RUNNING)
    app_id = handle.split("/", 3)[-1]
    assert len(objects(kube_api, ns, app_id)["pods"]) == 3
    runner.delete(handle)
    assert runner.status(handle) is None
    wait_until("all objects gone",
               lambda: objects(kube_api, ns, app_id) == {"jobs": [], "pods": [], "services": []})
    runner.delete(handle)  # idempotent


def test_list(runner: Runner, script: Script, ns: str) -> None:
    case = new_case(script, Behaviour.succeed(run_seconds=0.2))
    h1 = runner.run(app("one"), "kubernetes", cfg(ns, case))
    h2 = runner.run(app("two", n=2), "kubernetes", cfg(ns, case), job_key="prefect-42")
    runner.wait(h1, wait_interval=0.5, timeout=60)
    runner.wait(h2, wait_interval=0.5, timeout=60)
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
def test_replica_retry_policy_lets_kubernetes_retry(runner: Runner, script: Script,
                                                    ns: str) -> None:  # fmt: skip
    seen: dict[str, int] = {}

    def first_fails(pod: client.V1Pod) -> Behaviour:
        job = pod.metadata.labels.get("job-name", "")
        seen[job] = seen.get(job, 0) + 1
        return Behaviour.fail(exit_code=9, run_seconds=0.2) if seen[job] == 1 else (
            Behaviour.succeed(run_seconds=2.0))

    case = new_case(script, first_fails)
    handle = runner.run(
        app("replica", max_retries=2, retry_policy=RetryPolicy.REPLICA), "kubernetes",
        cfg(ns, case),
    )  # fmt: skip
    retried = wait_until(
        "the retried pod runs",
        lambda: (s := status(runner, handle)).num_restarts == 1 and s.state == AppState.RUNNING
        and s,
        timeout=60,
    )  # fmt: skip
    assert retried.roles[0].replicas[0].state == AppState.RUNNING
    final = runner.wait(handle, wait_interval=1, timeout=120)
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1 and sum(seen.values()) == 2


def test_application_retry_policy_restarts_the_app(runner: Runner, script: Script, ns: str,
                                                   kube_api: Any) -> None:  # fmt: skip
    def replica1_fails_once(pod: client.V1Pod) -> Behaviour:
        first_attempt = not pod.metadata.labels.get("job-name", "").endswith("-r1")
        if pod.metadata.labels["tether.dev/replica-id"] == "1" and first_attempt:
            return Behaviour.fail(exit_code=4, run_seconds=0.5)
        return Behaviour.succeed(run_seconds=1.0 if first_attempt else 0.3)

    case = new_case(script, replica1_fails_once)
    handle = runner.run(
        app("apprestart", n=2, max_retries=1, retry_policy=RetryPolicy.APPLICATION),
        "kubernetes", cfg(ns, case),
    )  # fmt: skip
    final = runner.wait(handle, wait_interval=0.5, timeout=120)
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1
    jobs = sorted(objects(kube_api, ns, handle.split("/", 3)[-1])["jobs"])
    name = handle.rsplit(":", 1)[1]
    assert jobs == [f"{name}-worker-0", f"{name}-worker-0-r1", f"{name}-worker-1",
                    f"{name}-worker-1-r1"]  # fmt: skip


def test_application_retries_exhausted_fail(runner: Runner, script: Script, ns: str) -> None:
    case = new_case(script, Behaviour.fail(exit_code=6, run_seconds=0.2))
    handle = runner.run(app("exhaust", max_retries=1), "kubernetes", cfg(ns, case))
    final = runner.wait(handle, wait_interval=0.5, timeout=120)
    assert final is not None and final.state == AppState.FAILED
    assert final.num_restarts == 1 and "exit code 6" in final.msg


def test_two_watchers_reconciling_at_once_restart_once(
    runner: Runner, script: Script, ns: str, kube_api: Any
) -> None:
    """Two watchers (two schedulers, as two processes would have) reconcile one failure at
    once: both read the app before either acts, so both plan the restart; one creates the
    next attempt, the other's create gets 409 and is left alone. The role restarts once."""

    def first_attempt_fails(pod: client.V1Pod) -> Behaviour:
        if pod.metadata.labels.get("job-name", "").endswith("-r1"):
            return Behaviour.succeed(run_seconds=0.3)
        return Behaviour.fail(exit_code=3, run_seconds=0.2)

    case = new_case(script, first_attempt_fails)
    handle = runner.run(app("twowatch", max_retries=1, retry_policy=RetryPolicy.ROLE),
                        "kubernetes", cfg(ns, case))  # fmt: skip
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
    assert final.num_restarts == 1


# ---- job identity ----------------------------------------------------------------------------
def test_idempotent_submit_with_job_key(runner: Runner, script: Script, ns: str, kube_api: Any,
                                        kube_cluster: KubeCluster) -> None:  # fmt: skip
    case = new_case(script, Behaviour.run_forever())
    key = "airflow-" + hashlib.sha256(ns.encode()).hexdigest()[:32]
    first = runner.run(app("idem", n=2), "kubernetes", cfg(ns, case), job_key=key)
    second = runner.run(app("idem", n=2), "kubernetes", cfg(ns, case), job_key=key)
    assert second == first
    # a fresh runner (another process, e.g. a retried orchestrator task) finds it too
    with Runner(scheduler_params={"kubernetes": {"kubeconfig": str(kube_cluster.kubeconfig_path)}}
                ) as other:  # fmt: skip
        assert other.run(app("idem", n=2), "kubernetes", cfg(ns, case), job_key=key) == first
    # the lookup is the Runner's; the scheduler records the key so find_jobs finds the job
    sched = create_scheduler("tether", client=kube_api)
    assert [j.app_id for j in sched.find_jobs(key)] == [first.split("/", 3)[-1]]
    assert len(objects(kube_api, ns, first.split("/", 3)[-1])["jobs"]) == 2
    all_jobs = client.BatchV1Api(kube_api).list_namespaced_job(ns).items
    assert len(all_jobs) == 2
    # once cancelled, the same key submits a new job (a retry)
    runner.cancel(first)
    third = runner.run(app("idem", n=2), "kubernetes", cfg(ns, case), job_key=key)
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


def test_gang_options_against_their_crds(runner: Runner, script: Script, ns: str,
                                         kube_api: Any) -> None:  # fmt: skip
    api = KubeApi(kube_api)
    case = new_case(script, Behaviour.succeed(run_seconds=0.3))
    ext = client.ApiextensionsV1Api(kube_api)
    installed = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    if "jobs.batch.volcano.sh" not in installed:
        with pytest.raises(KubernetesApiError, match="is Volcano installed"):
            runner.run(app("novc"), "kubernetes", cfg(ns, case, gang="volcano"))
    install_crd(kube_api, "batch.volcano.sh", "Job", "jobs", "v1alpha1")
    install_crd(kube_api, "bus.volcano.sh", "Command", "commands", "v1alpha1")
    install_crd(kube_api, "mcad.ibm.com", "AppWrapper", "appwrappers", "v1beta1")

    # volcano: one Volcano Job; the test plays the Volcano controller's status
    h_vc = runner.run(app("vc", n=2), "kubernetes", cfg(ns, case, gang="volcano", queue="research"))
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
    h_aw = runner.run(app("aw", n=2), "kubernetes", cfg(ns, case, gang="appwrapper"))
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
    h_kq = runner.run(app("kq"), "kubernetes", cfg(ns, case, gang="kueue", queue="team-a"))
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(
        ns, label_selector=f"tether.dev/app-id={h_kq.rsplit(':', 1)[1]}").items
    assert [j.metadata.labels["kueue.x-k8s.io/queue-name"] for j in jobs] == ["team-a"]
    final = runner.wait(h_kq, wait_interval=0.5, timeout=60)
    assert final is not None and final.state == AppState.SUCCEEDED
