"""Infrastructure failures told apart from application failures, on a real kube-apiserver.

A test kubelet (``tests/e2e/infra/kubelet.py``) runs the pods; the kube-controller-manager's
Job controller fails the Job after its pod failed. The apiserver here is 1.20: it stores a
``DisruptionTarget`` condition the kubelet writes (as 1.26+ kubelets do) but does not add one
itself on an eviction through the eviction API, so the evictions are the kubelet's
(node pressure).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tether.runner import Runner
from tether.runner.journal import Journal
from tether.runner.recovery import RecoveringRun
from tether.schedulers.errors import CapacityError
from tether.schedulers.kubernetes.client import KubernetesApiError
from tether.specs import AppDef, AppState, FailureCause, RecoveryPolicy, Role

# The test kubelet, not the real node: these tests evict a pod with a chosen message and
# condition at a chosen moment, which a real kubelet does only under real node pressure.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.fake_kubelet("evictions with a chosen message and DisruptionTarget condition"),
]

SUITE = "kubernetes-failure-causes"


def _env(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def _behaviour(pod: client.V1Pod) -> Behaviour:
    case = pod.metadata.labels.get("case")
    if case == "app-fails":
        return Behaviour.fail(exit_code=3, run_seconds=0.3)
    if case == "recover" and _env(pod).get("TETHER_ATTEMPT") != "0":
        return Behaviour.succeed(run_seconds=0.3)
    return Behaviour.run_forever()


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[FakeKubelet]:
    with FakeKubelet(
        kube_api, node_name="tether-causes-node", label_selector=f"e2e-suite={SUITE}",
        behaviour=_behaviour,
    ) as kl:  # fmt: skip
        yield kl


@pytest.fixture
def runner(kube_api: Any, kubelet: FakeKubelet, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as r:
        yield r


@pytest.fixture
def ns(kube_api: Any, request: pytest.FixtureRequest) -> str:
    name = "c-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    return name


def _app() -> AppDef:
    return AppDef("causes", roles=[Role("worker", image="busybox:1.36", entrypoint="sleep",
                                        args=["600"])])  # fmt: skip


def _cfg(ns: str, case: str) -> dict[str, Any]:
    return {"namespace": ns, "labels": {"e2e-suite": SUITE, "case": case}}


def _pod_name(kube_api: Any, ns: str, kubelet: FakeKubelet) -> str:
    v1 = client.CoreV1Api(kube_api)
    for _ in range(300):
        for pod in v1.list_namespaced_pod(ns).items:
            rec = kubelet.record(ns, pod.metadata.name)
            if rec is not None and rec.state == "running":
                return str(pod.metadata.name)
        time.sleep(0.2)
    raise AssertionError("no running pod")


def test_evicted_pod_is_an_infrastructure_failure(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str
) -> None:
    handle = runner.run(_app(), "kubernetes", _cfg(ns, "evicted"))
    pod = _pod_name(kube_api, ns, kubelet)
    kubelet.evict(ns, pod, message="The node was low on resource: memory.")
    final = runner.wait(handle, wait_interval=1, timeout=120)
    assert final is not None and final.state == AppState.FAILED, final
    cause = final.cause()
    assert cause is not None and cause.cause == FailureCause.EVICTED, final
    assert cause.is_infrastructure
    assert "TerminationByKubelet" in cause.reason and "low on resource" in cause.reason
    rep = final.roles[0].replicas[0]
    assert rep.failure is not None and rep.failure.cause == FailureCause.EVICTED
    text = final.format()
    assert "Cause: evicted (DisruptionTarget: TerminationByKubelet" in text
    assert final.to_dict()["failure"] == {
        "cause": "evicted", "reason": cause.reason, "exit_code": None,
    }  # fmt: skip


def test_evicted_without_disruption_target_reads_the_pod_reason(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str
) -> None:
    handle = runner.run(_app(), "kubernetes", _cfg(ns, "evicted-old"))
    pod = _pod_name(kube_api, ns, kubelet)
    kubelet.evict(ns, pod, message="Pod ephemeral local storage usage exceeds the total limit",
                  disruption_target=False)  # fmt: skip
    final = runner.wait(handle, wait_interval=1, timeout=120)
    assert final is not None and final.state == AppState.FAILED, final
    cause = final.cause()
    assert cause is not None and cause.cause == FailureCause.EVICTED
    assert cause.reason.startswith("Evicted: Pod ephemeral local storage")


def test_application_exit_code_is_not_infrastructure(
    runner: Runner, kubelet: FakeKubelet, ns: str
) -> None:
    handle = runner.run(_app(), "kubernetes", _cfg(ns, "app-fails"))
    final = runner.wait(handle, wait_interval=1, timeout=120)
    assert final is not None and final.state == AppState.FAILED, final
    cause = final.cause()
    assert cause is not None and cause.cause == FailureCause.APPLICATION
    assert cause.exit_code == 3 and not cause.is_infrastructure
    assert "Cause: application, exit code 3" in final.format()


def _wait_until_quota_admission_sees(kube_api: Any, ns: str, quota: str) -> None:
    """Waits until the apiserver's quota admission refuses a Job in ``ns`` by ``quota``.

    Admission reads quotas from an informer cache, and a namespace it found without quotas
    stays so for up to 30 s (its live-lookup cache: the service account controller's writes
    primed it). A cluster's admins see the same: a new quota holds shortly after it is made.
    Probed with server-side dry runs, which pass admission and store nothing.
    """
    batch = client.BatchV1Api(kube_api)
    probe = {
        "metadata": {"name": "quota-probe"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox:1.36"}]}}},
    }  # fmt: skip
    deadline = time.monotonic() + 90
    while True:
        try:
            batch.create_namespaced_job(ns, probe, dry_run="All")
            seen = "admitted"
        except client.ApiException as err:
            if err.status == 403 and f"exceeded quota: {quota}" in str(err.body):
                return
            seen = f"{err.status}: {err.body}"
        assert time.monotonic() < deadline, f"quota admission never refused by {quota}: {seen}"
        time.sleep(0.5)


def test_resource_quota_refusal_is_a_capacity_error(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str
) -> None:
    """A namespace whose ResourceQuota allows no more Jobs: the apiserver's quota admission
    answers 403 ``exceeded quota``. This cluster runs no resourcequota controller, so the test
    writes the quota's status (hard and used) as that controller would."""
    _no_room_for_jobs(kube_api, ns)
    with pytest.raises(CapacityError) as info:
        runner.run(_app(), "kubernetes", _cfg(ns, "quota"))
    err = info.value
    assert isinstance(err, KubernetesApiError) and err.status == 403
    assert err.backend == "kubernetes" and err.kind == "quota" and err.quota == "team-quota"
    assert err.detail.startswith("exceeded quota: team-quota")
    assert err.failure.cause == FailureCause.OUT_OF_CAPACITY
    text = str(err)
    assert "ResourceQuota 'team-quota' has no room" in text
    assert "may not create" not in text
    assert client.BatchV1Api(kube_api).list_namespaced_job(ns).items == []



def _no_room_for_jobs(kube_api: Any, ns: str) -> None:
    """A ResourceQuota that allows no Job in ``ns``, seen by quota admission (this cluster
    runs no resourcequota controller: the test writes its status as that controller would)."""
    v1 = client.CoreV1Api(kube_api)
    hard = {"count/jobs.batch": "0"}
    v1.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "team-quota"}, "spec": {"hard": hard}}
    )
    v1.patch_namespaced_resource_quota_status(
        "team-quota", ns, {"status": {"hard": hard, "used": {"count/jobs.batch": "0"}}}
    )
    _wait_until_quota_admission_sees(kube_api, ns, "team-quota")


def test_quota_refusal_fails_over_to_local_cwd(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str, tmp_path: Path
) -> None:
    """``run(app, ["kubernetes", "local_cwd"])`` where the namespace's quota has no room:
    the refusal is recorded and the same logical job runs on ``local_cwd``; the options only
    kubernetes declares go to kubernetes only. Running it again with its job key adopts
    it."""
    _no_room_for_jobs(kube_api, ns)
    role = Role("worker", image="busybox:1.36", entrypoint=sys.executable,
                args=["-c", "import os; print('ran attempt', os.environ['TETHER_ATTEMPT'])"])
    app = AppDef("failover", roles=[role], checkpoint=str(tmp_path / "ckpt"))  # fmt: skip
    candidates = ["kubernetes", "local_cwd"]
    outcome = runner.run_or_attach(app, candidates, _cfg(ns, "quota"), job_key=f"fo-{ns}")
    handle = outcome.app_handle
    assert handle.startswith("chain://") and not outcome.reattached
    [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd"
    assert attempt["handle"].startswith("local_cwd://")
    [refusal] = attempt["refused"]
    assert refusal.startswith("kubernetes: ")
    assert "ResourceQuota 'team-quota' has no room" in refusal
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    assert status.msg.startswith("attempt 0 on local_cwd")
    assert list(runner.log_lines(handle, "worker")) == [
        "[tether] attempt 0 on local_cwd\n", "ran attempt 0\n"]
    assert client.BatchV1Api(kube_api).list_namespaced_job(ns).items == []
    again = runner.run_or_attach(app, candidates, _cfg(ns, "quota"), job_key=f"fo-{ns}")
    assert again.app_handle == handle and again.reattached
    assert len(runner.attempts(handle)) == 1


def test_quota_refusal_with_no_candidate_left_is_the_capacity_error(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str, tmp_path: Path
) -> None:
    """The last candidate refusing raises its CapacityError; the logical job is recorded as
    FAILED for capacity (nothing left behind to follow)."""
    _no_room_for_jobs(kube_api, ns)
    with pytest.raises(CapacityError, match="team-quota"):
        runner.run(_app(), ["kubernetes"], _cfg(ns, "quota"), job_key=f"full-{ns}")
    chain = Journal(f"full-{ns}", tmp_path / "state" / "recovery").load()
    assert chain is not None and chain.done
    assert (chain.current.state, chain.current.cause) == ("FAILED", "out_of_capacity")
    assert chain.current.handle is None and len(chain.current.refused) == 1
    assert client.BatchV1Api(kube_api).list_namespaced_job(ns).items == []


def test_evicted_attempt_is_recovered_as_the_next_attempt(
    runner: Runner, kubelet: FakeKubelet, kube_api: Any, ns: str, tmp_path: Path
) -> None:
    """The recovery loop on a real apiserver: attempt 0's pod is evicted mid-run (an
    infrastructure cause, which the default policy recovers from); attempt 1 runs with
    ``TETHER_ATTEMPT=1`` and the checkpoint location, and succeeds."""
    app = dataclasses.replace(
        _app(), recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0),
        checkpoint="s3://bucket/run-9",
    )  # fmt: skip
    evicted: list[str] = []

    def evict_attempt_zero() -> None:
        v1 = client.CoreV1Api(kube_api)
        for _ in range(600):
            for pod in v1.list_namespaced_pod(ns).items:
                rec = kubelet.record(ns, pod.metadata.name)
                if rec is not None and rec.state == "running" and (
                    _env(pod).get("TETHER_ATTEMPT") == "0"
                ):
                    kubelet.evict(ns, pod.metadata.name)
                    evicted.append(pod.metadata.name)
                    return
            time.sleep(0.2)

    evictor = threading.Thread(target=evict_attempt_zero, daemon=True)
    evictor.start()
    out = RecoveringRun(runner, f"k8s-{ns}", journal_dir=tmp_path / "journal").run(
        app, "kubernetes", _cfg(ns, "recover"), wait_interval=0.5
    )
    evictor.join(timeout=60)
    assert evicted, "attempt 0 never ran"
    assert out.status.state == AppState.SUCCEEDED, out.status
    assert [(a.attempt, a.state, a.cause) for a in out.attempts] == [
        (0, "FAILED", "evicted"), (1, "SUCCEEDED", None)
    ]  # fmt: skip
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns).items
    envs = sorted((_env(p)["TETHER_ATTEMPT"], _env(p)["TETHER_CHECKPOINT"]) for p in pods)
    assert envs == [("0", "s3://bucket/run-9"), ("1", "s3://bucket/run-9")]
