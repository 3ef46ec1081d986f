"""Each backend's table from native failure reasons to :class:`FailureCause`.

Kubernetes and local causes are also checked on real software (``tests/e2e/
test_kubernetes_failure_causes_e2e.py``, ``test_local_cwd_failure_cause`` below). AWS Batch
and SageMaker: moto cannot reclaim a spot instance or terminate a host under a job, so their
documented reasons are checked here as tables, on the job descriptions the APIs return.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.schedulers.aws_batch.status import job_failure as batch_failure
from tether.schedulers.aws_sagemaker.status import job_failure as sagemaker_failure
from tether.schedulers.kubernetes.status import pod_failure
from tether.schedulers.local.scheduler import create_scheduler as create_local
from tether.schedulers.local.status import replica_failure
from tether.schedulers.ray.status import job_failure as ray_failure
from tether.schedulers.slurm.status import Component, component_failure, submit_refusal_limit
from tether.specs import AppDef, AppState, FailureCause, Role

C = FailureCause


def _pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, **status}}


def _disruption(reason: str) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "m"}


@pytest.mark.parametrize(
    ("pod", "cause"),
    [
        (_pod("Failed", conditions=[_disruption("PreemptionByScheduler")]), C.PREEMPTED),
        (_pod("Failed", conditions=[_disruption("DeletionByTaintManager")]), C.NODE_LOST),
        (_pod("Failed", conditions=[_disruption("DeletionByPodGC")]), C.NODE_LOST),
        (_pod("Failed", conditions=[_disruption("EvictionByEvictionAPI")]), C.EVICTED),
        (_pod("Failed", conditions=[_disruption("TerminationByKubelet")]), C.EVICTED),
        (_pod("Failed", reason="Evicted", message="low on memory"), C.EVICTED),
        (_pod("Unknown", reason="NodeLost"), C.NODE_LOST),
        (_pod("Failed", reason="Terminated", message="imminent node shutdown"),
         C.HOST_TERMINATED),
        (_pod("Failed", reason="OutOfcpu"), C.OUT_OF_CAPACITY),
        (_pod("Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable"}]), C.OUT_OF_CAPACITY),
        (_pod("Failed", containerStatuses=[{"state": {"terminated": {
            "exitCode": 137, "reason": "OOMKilled"}}}]), C.OOM_KILLED),
        (_pod("Failed", containerStatuses=[{"state": {"terminated": {
            "exitCode": 3, "reason": "Error"}}}]), C.APPLICATION),
    ],
)  # fmt: skip
def test_kubernetes_pod_causes(pod: dict[str, Any], cause: FailureCause) -> None:
    failure = pod_failure(pod)
    assert failure is not None and failure.cause == cause


def test_kubernetes_running_pod_has_no_failure() -> None:
    assert pod_failure(_pod("Running")) is None
    assert pod_failure(_pod("Pending")) is None


@pytest.mark.parametrize(
    ("state", "cause", "infra"),
    [
        ("PREEMPTED", C.PREEMPTED, True),
        ("NODE_FAIL", C.NODE_LOST, True),
        ("BOOT_FAIL", C.OUT_OF_CAPACITY, True),
        ("OUT_OF_MEMORY", C.OOM_KILLED, False),
        ("FAILED", C.APPLICATION, False),
        ("TIMEOUT", C.APPLICATION, False),
    ],
)
def test_slurm_state_causes(state: str, cause: FailureCause, infra: bool) -> None:
    failure = component_failure(Component("7", 0, state, reason="x", exit_code=1))
    assert failure is not None and failure.cause == cause and failure.is_infrastructure == infra
    assert failure.reason == f"{state}: x"


def test_slurm_non_failed_states_have_no_cause() -> None:
    for state in ("RUNNING", "COMPLETED", "CANCELLED", "PENDING"):
        assert component_failure(Component("7", 0, state)) is None


def _batch(reason: str, container_reason: str = "", code: int | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"reason": container_reason} if container_reason else {}
    if code is not None:
        container["exitCode"] = code
    return {"status": "FAILED", "statusReason": reason,
            "attempts": [{"container": container, "statusReason": reason}]}  # fmt: skip


@pytest.mark.parametrize(
    ("job", "cause"),
    [
        (_batch("Host EC2 (instance i-0123456789abcdef0) terminated."), C.HOST_TERMINATED),
        (_batch("Essential container in task exited",
                "OutOfMemoryError: Container killed due to memory usage", 137), C.OOM_KILLED),
        (_batch("Essential container in task exited", code=2), C.APPLICATION),
        (_batch("Task failed to start", "CannotCreateContainerError: no space"),
         C.OUT_OF_CAPACITY),
        (_batch("Something unexpected"), C.UNKNOWN),
    ],
)  # fmt: skip
def test_aws_batch_documented_reasons(job: dict[str, Any], cause: FailureCause) -> None:
    failure = batch_failure(job)
    assert failure is not None and failure.cause == cause


@pytest.mark.parametrize(
    ("stderr", "limit"),
    [
        ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
         "(job submit limit, user's size and/or time limits)", "QOS or association"),
        ("sbatch: error: QOSMaxSubmitJobPerUserLimit", "QOS or association"),
        ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
         "as many jobs"),
        ("sbatch: error: Batch job submission failed: Invalid qos specification", None),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not "
         "available", None),
    ],
)  # fmt: skip
def test_slurm_submit_refusals_for_capacity(stderr: str, limit: str | None) -> None:
    """The words of sbatch's refusals (the first on the e2e accounting cluster, the rest as
    Slurm documents them): a submit limit is a capacity refusal, a bad request is not."""
    found = submit_refusal_limit(stderr)
    assert (found is None) == (limit is None)
    assert limit is None or limit in str(found)


def test_aws_batch_cancel_is_not_a_failure() -> None:
    assert batch_failure({"status": "FAILED", "statusReason": "cancelled by tether"}) is None
    assert batch_failure({"status": "RUNNING"}) is None


@pytest.mark.parametrize(
    ("job", "cause"),
    [
        ({"SecondaryStatus": "Interrupted", "FailureReason": ""}, C.PREEMPTED),
        ({"SecondaryStatus": "MaxWaitTimeExceeded"}, C.OUT_OF_CAPACITY),
        ({"FailureReason": "CapacityError: Unable to provision requested ML compute capacity"},
         C.OUT_OF_CAPACITY),
        ({"FailureReason": "AlgorithmError: ExecuteUserScriptError: exit code: 2"},
         C.APPLICATION),
        ({"FailureReason": "InternalServerError: We encountered an internal error."},
         C.UNKNOWN),
    ],
)  # fmt: skip
def test_sagemaker_reasons(job: dict[str, Any], cause: FailureCause) -> None:
    failure = sagemaker_failure({"TrainingJobStatus": "Failed", **job})
    assert failure is not None and failure.cause == cause


def test_sagemaker_exit_code_parsed() -> None:
    failure = sagemaker_failure({"TrainingJobStatus": "Failed",
                                 "FailureReason": "AlgorithmError: exit code: 2"})  # fmt: skip
    assert failure is not None and failure.exit_code == 2


@pytest.mark.parametrize(
    ("message", "cause", "code"),
    [
        ("Job supervisor actor died: the node running it has died", C.NODE_LOST, None),
        ("Task was killed due to the node running low on memory.", C.OOM_KILLED, None),
        ("Job entrypoint command failed with exit code 4, last available logs: ...",
         C.APPLICATION, 4),
        ("", C.UNKNOWN, None),
        # what the driver says of a replica whose task died with its node
        ("Job entrypoint command failed with exit code 1, last available logs:\n"
         "tether: role 'w' replica 0 its Ray task failed: ray.exceptions.NodeDiedError: "
         "the node 3f2a was lost", C.NODE_LOST, None),
        # a replica's own output is the application's, whatever it says
        ("Job entrypoint command failed with exit code 1, last available logs:\n"
         "\x1b[36m(run_replica pid=13347)\x1b[0m [w/0] the node 0a1b running my peer died\n"
         "\x1b[36m(run_replica pid=13347)\x1b[0m tether: end of [w/0]\n"
         "tether: role 'w' replica 0 exited with code 3", C.APPLICATION, 3),
        ("Job entrypoint command failed with exit code 1, last available logs:\n"
         "[w/1] preempted by the scheduler? no\ntether: role 'w' replica 1 exited with code 2",
         C.APPLICATION, 2),
        # seen on a loaded machine: the driver's last line right after a replica's end mark
        ("Job entrypoint command failed with exit code 1, last available logs:\n"
         "\x1b[36m(run_replica pid=5490)\x1b[0m [w/0] the node 0a1b2c running my peer died\n"
         "\x1b[36m(run_replica pid=5490)\x1b[0m tether: end of [w/0]tether: role 'w' replica "
         "0 exited with code 3", C.APPLICATION, 3),
    ],
)  # fmt: skip
def test_ray_messages(message: str, cause: FailureCause, code: int | None) -> None:
    failure = ray_failure("FAILED", message)
    assert failure is not None and failure.cause == cause and failure.exit_code == code
    assert ray_failure("SUCCEEDED", message) is None


def test_local_replica_failure_table() -> None:
    assert replica_failure(AppState.SUCCEEDED, 0) is None
    f = replica_failure(AppState.FAILED, -9, "was killed by signal SIGKILL")
    assert f is not None and f.cause == C.APPLICATION and f.exit_code == -9
    lost = replica_failure(AppState.FAILED, None, "supervisor gone")
    assert lost is not None and lost.cause == C.UNKNOWN


def test_local_cwd_failure_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real replica process that exits 5: an application failure with its exit code."""
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    s = create_local("t")
    app = AppDef("bad", roles=[Role("r", image=str(tmp_path), entrypoint=sys.executable,
                                    args=["-c", "raise SystemExit(5)"])])  # fmt: skip
    app_id = s.schedule(s.submit_dryrun(app, {"log_dir": str(tmp_path / "logs")}))
    desc = s.describe(app_id)
    for _ in range(600):
        desc = s.describe(app_id)
        if desc is not None and desc.state.is_terminal():
            break
        s.wait_for_change(app_id, 0.5)
    assert desc is not None and desc.state == AppState.FAILED
    rep = desc.roles_statuses[0].replicas[0]
    assert rep.failure is not None and rep.failure.cause == C.APPLICATION
    assert rep.failure.exit_code == 5


def test_kubernetes_quota_refusal_told_from_permission_refusal() -> None:
    from tether.schedulers.kubernetes.client import KubernetesApiError, quota_refusal

    quota = KubernetesApiError(
        403, 'POST /apis/batch/v1/namespaces/n/jobs: 403 Forbidden: jobs.batch "x" is '
        "forbidden: exceeded quota: team-quota, requested: count/jobs.batch=1, "
        "used: count/jobs.batch=0, limited: count/jobs.batch=0",
    )  # fmt: skip
    got = quota_refusal(quota)
    assert got is not None and got[0] == "team-quota"
    assert got[1].startswith("exceeded quota: team-quota, requested: count/jobs.batch=1")
    rbac = KubernetesApiError(
        403, 'POST ...: 403 Forbidden: jobs.batch is forbidden: User "bob" cannot create '
        'resource "jobs" in API group "batch" in the namespace "n"',
    )  # fmt: skip
    assert quota_refusal(rbac) is None
    assert quota_refusal(KubernetesApiError(404, "exceeded quota: q")) is None
