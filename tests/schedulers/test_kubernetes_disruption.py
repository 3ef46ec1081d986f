"""A Job's pod deleted under it (the eviction API, its node lost): the plan and the status.

Pure: plain dicts as the apiserver returns them (see ``test_kubernetes_status.py``); the e2e
module ``tests/e2e/test_kubernetes_disruption_e2e.py`` runs the same on a real apiserver.
"""

from __future__ import annotations

from typing import Any

from tests.schedulers.test_kubernetes_status import condition, jobs_of, make_app, pod_for, view
from tether.schedulers.kubernetes.disruption import (
    DISRUPTED,
    disruption_failure,
    encode_failure,
)
from tether.schedulers.kubernetes.naming import (
    ANN_FAILURE,
    ANN_POD,
    ANN_STOP_REASON,
    ANN_STOPPED,
)
from tether.schedulers.kubernetes.reconcile import next_attempt_job
from tether.specs import AppState, RetryPolicy
from tether.specs.failures import Failure, FailureCause


def _one() -> tuple[str, dict[str, Any]]:
    name, objs = make_app(n=1, retries=0)
    (job,) = jobs_of(objs)
    return name, job


def _deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def test_the_one_bound_pod_is_recorded_once() -> None:
    name, job = _one()
    assert view(name, [job], [pod_for(job, "Pending")]).records == [
        (job, f"{job['metadata']['name']}-0@node-1")
    ]
    unbound = pod_for(job, "Pending")
    unbound["spec"].pop("nodeName")
    assert view(name, [job], [unbound]).records == []
    job["metadata"]["annotations"][ANN_POD] = f"{job['metadata']['name']}-0@node-1"
    v = view(name, [job], [pod_for(job, "Running")])
    assert v.records == [] and v.disruptions == [] and v.state == AppState.RUNNING


def test_a_recorded_pod_gone_or_deleted_while_running_is_a_disruption() -> None:
    name, job = _one()
    pod_name = f"{job['metadata']['name']}-0"
    job["metadata"]["annotations"][ANN_POD] = f"{pod_name}@node-1"
    # gone, the Job controller's replacement in its place (Kubernetes before 1.26)
    v = view(name, [job], [pod_for(job, "Pending", n=1)])
    assert v.disruptions == [(job, pod_name, "node-1", None)]
    assert v.state == AppState.PENDING  # until reconcile stops the Job with the cause
    # still there, being deleted (the eviction API's graceful delete)
    deleting = _deleting(pod_for(job, "Running"))
    assert view(name, [job], [deleting]).disruptions == [(job, pod_name, "node-1", deleting)]
    # ended before it was deleted: the Job's own outcome, no disruption
    done = _deleting(pod_for(job, "Succeeded"))
    assert view(name, [job], [done]).disruptions == []


def test_jobs_tether_does_not_watch() -> None:
    name, objs = make_app(n=1, policy=RetryPolicy.REPLICA, retries=2)
    (job,) = jobs_of(objs)  # backoffLimit 2: Kubernetes retries the pod itself
    job["metadata"]["annotations"][ANN_POD] = "gone@node-1"
    assert view(name, [job], []).disruptions == []
    _, job = _one()
    job["metadata"]["annotations"].update({ANN_POD: "gone@node-1", ANN_STOPPED: "cancelled"})
    assert view(name, [job], []).disruptions == []  # tether stopped it
    name, objs = make_app(n=1, retries=0, gang="kueue")
    (job,) = jobs_of(objs)  # Kueue deletes the pods of a Job it preempts, and requeues it
    job["metadata"]["annotations"][ANN_POD] = "gone@node-1"
    assert view(name, [job], []).disruptions == []


def test_the_cause_names_the_lost_node_or_the_eviction() -> None:
    lost = disruption_failure("p", "n1", None, node_exists=False)
    assert lost.cause == FailureCause.NODE_LOST and "node n1 was deleted" in lost.reason
    evicted = disruption_failure("p", "n1", None, node_exists=True)
    assert evicted.cause == FailureCause.EVICTED and "eviction API" in evicted.reason
    unread = disruption_failure("p", "n1", None, node_exists=None)
    assert unread.cause == FailureCause.EVICTED and "could not be read" in unread.reason
    own = Failure(FailureCause.PREEMPTED, "DisruptionTarget: PreemptionByScheduler")
    assert disruption_failure("p", "n1", own, node_exists=True) == own
    app = Failure(FailureCause.APPLICATION, "exit code 1", 1)
    assert disruption_failure("p", "n1", app, node_exists=True).cause == FailureCause.EVICTED


def test_a_disrupted_job_is_failed_with_its_cause_and_restartable() -> None:
    failure = Failure(FailureCause.NODE_LOST, "NodeLost: pod p was deleted after ...")
    ann = {ANN_STOPPED: DISRUPTED, ANN_STOP_REASON: failure.reason,
           ANN_FAILURE: encode_failure(failure), ANN_POD: "p@node-1"}  # fmt: skip
    name, job = _one()
    job["metadata"]["annotations"].update(ann)
    v = view(name, [job], [])
    assert v.state == AppState.FAILED and v.replicas[0].failure == failure
    assert v.stops == [] and v.creates == []  # no retries left; nothing else to stop

    name, objs = make_app(n=1, retries=1)
    (job,) = jobs_of(objs)
    job["metadata"]["annotations"].update(ann)
    v = view(name, [job], [])
    assert v.state == AppState.PENDING  # tether's own retry (APPLICATION, 1 left)
    (nxt,) = v.creates
    assert not {ANN_STOPPED, ANN_POD, ANN_FAILURE} & set(nxt["metadata"]["annotations"])
    assert nxt == next_attempt_job(job, 1, 1)


def test_a_disrupted_job_ends_only_when_none_of_its_pods_runs() -> None:
    """Never two attempts at once: the Job's replacement pod (or the evicted pod in its
    grace period) still runs until the stop has ended it."""
    failure = Failure(FailureCause.EVICTED, "PodDeleted: pod p on node n1 was deleted ...")
    name, job = _one()
    job["metadata"]["annotations"].update(
        {ANN_STOPPED: DISRUPTED, ANN_STOP_REASON: failure.reason,
         ANN_FAILURE: encode_failure(failure)}
    )  # fmt: skip
    v = view(name, [job], [_deleting(pod_for(job, "Running", n=1))])
    assert v.state == AppState.PENDING and "stopping 1 pod(s)" in v.msg
    v = view(name, [job], [pod_for(job, "Failed", n=1)])
    assert v.state == AppState.FAILED and v.replicas[0].failure == failure


def _killed(job: dict[str, Any], finished: str, grace: int = 30) -> dict[str, Any]:
    """A pod deleted at 00:00:00 (its deletionTimestamp after the grace period), Failed."""
    pod = pod_for(job, "Failed", containerStatuses=[{"name": "c", "state": {"terminated": {
        "exitCode": 143, "reason": "Error", "finishedAt": finished}}}])  # fmt: skip
    pod["metadata"]["deletionTimestamp"] = f"2026-01-01T00:00:{grace:02d}Z"
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def test_a_job_failed_by_its_pods_deletion_reports_the_eviction() -> None:
    """A real kubelet kills a deleted pod's container and reports the pod Failed before it
    goes; a Job controller that sees that first fails the Job (BackoffLimitExceeded): the
    exit code is the kill's, the cause the eviction."""
    name, job = _one()
    condition(job, "Failed", "BackoffLimitExceeded", "Job has reached the backoff limit")
    v = view(name, [job], [_killed(job, "2026-01-01T00:00:01Z")])
    assert v.state == AppState.FAILED
    failure = v.replicas[0].failure
    assert failure is not None and failure.cause == FailureCause.EVICTED, failure
    assert failure.reason.startswith("PodDeleted:") and failure.exit_code == 143
    # it ended before it was deleted: the program's own exit code
    v = view(name, [job], [_killed(job, "2025-12-31T23:59:58Z")])
    assert v.replicas[0].failure == Failure(FailureCause.APPLICATION, "exit code 143 (Error)", 143)


def test_pods_tether_or_the_deadline_stopped_are_not_evictions() -> None:
    name, job = _one()
    job["metadata"]["annotations"].update({ANN_STOPPED: "superseded", ANN_STOP_REASON: "x"})
    failure = view(name, [job], [_killed(job, "2026-01-01T00:00:01Z")]).replicas[0].failure
    assert failure is not None and failure.cause == FailureCause.APPLICATION
    name, job = _one()
    condition(job, "Failed", "DeadlineExceeded", "Job was active longer than specified")
    failure = view(name, [job], [_killed(job, "2026-01-01T00:00:01Z")]).replicas[0].failure
    assert failure is not None and failure.cause == FailureCause.APPLICATION
