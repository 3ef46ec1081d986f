"""A Job's pod deleted under it: an eviction through the eviction API, or its node lost.

Before Kubernetes 1.26 (and without a ``podFailurePolicy``), a ``batch/v1`` Job whose running
pod is *deleted* (the eviction API, a drain, pod garbage collection after its Node was
deleted) does not count a failure: the Job controller creates a replacement pod and the
deleted one disappears, so no failure is ever seen and the app's recovery policy never
runs. tether notices it instead, for the Jobs whose restarts are its own (``backoffLimit``
0: the ``ROLE`` and ``APPLICATION`` retry policies, which recovery-policy apps use):

1. :func:`plan_disruptions` records the Job's *pod of record* (``tether.dev/pod``:
   ``POD@NODE``) once the Job has exactly one pod, bound to a node and not being deleted;
2. when that pod is later gone, or being deleted while it had not ended, and tether did
   not stop the Job, the Job was disrupted: reconcile stops it (``tether.dev/stopped:
   disrupted``) with the cause (``tether.dev/failure``) of :func:`disruption_failure`:
   ``node_lost`` when the pod's Node no longer exists, else ``evicted``, or the pod's own
   ``DisruptionTarget`` when a 1.26+ cluster gave one. The replica is then FAILED with that
   cause, like a Job that failed (tether's own retries and the recovery policy apply).

Both steps run in reconcile (the follower of the app), so a disruption while nobody follows
the app, before the pod was recorded, stays the Job controller's silent replacement. Pure
functions; :mod:`~.actions` writes the annotations and reads the Node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from tether.schedulers.kubernetes.fields import (
    annotations_of,
    meta_of,
    parse_time,
    to_int,
    true_conditions,
)
from tether.schedulers.kubernetes.naming import ANN_FAILURE, ANN_POD, ANN_STOP_REASON
from tether.schedulers.kubernetes.pods import owned_by
from tether.schedulers.kubernetes.reconcile import job_active
from tether.schedulers.kubernetes.views import AppView, Replica
from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause

DISRUPTED = "disrupted"
"""The ``tether.dev/stopped`` kind of a Job stopped because its pod was deleted under it."""

_ENDED = ("Succeeded", "Failed")


def watches_its_pod(job: Mapping[str, Any]) -> bool:
    """Whether tether watches the Job's pod: an active Job that retries no pod itself.

    Args:
        job: The ``batch/v1`` Job.

    Returns:
        True for an active, unsuspended Job with ``backoffLimit`` 0 and no deadline.
    """
    spec = job.get("spec") or {}
    return (
        to_int(spec.get("backoffLimit"), 6) == 0
        and not spec.get("suspend")
        and spec.get("activeDeadlineSeconds") is None
        and job_active(job)
    )


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_of_record(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Job's recorded pod and its node, when tether recorded one."""
    value = annotations_of(job).get(ANN_POD, "")
    pod, sep, node = value.partition("@")
    return (pod, node) if sep and pod else None


def pod_to_record(pods: list[dict[str, Any]]) -> str | None:
    """``POD@NODE`` of a Job's one pod, once it is bound and not being deleted.

    Args:
        pods: The Job's pods.

    Returns:
        The annotation's value, or None (no pod, several, or not bound yet).
    """
    if len(pods) != 1:
        return None
    pod = pods[0]
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node or meta_of(pod).get("deletionTimestamp") or _phase(pod) in _ENDED:
        return None
    return f"{meta_of(pod).get('name')}@{node}"


def lost_pod(
    recorded: tuple[str, str], pods: list[dict[str, Any]]
) -> tuple[str, str, dict[str, Any] | None] | None:
    """The recorded pod, when it is gone or being deleted before it ended.

    Args:
        recorded: ``(pod, node)`` of record.
        pods: The Job's pods.

    Returns:
        ``(pod name, node, the pod while it is still there)``, or None when it is fine.
    """
    name, node = recorded
    pod = next((p for p in pods if meta_of(p).get("name") == name), None)
    if pod is None:
        return name, node, None
    if meta_of(pod).get("deletionTimestamp") and _phase(pod) not in _ENDED:
        return name, node, pod
    return None


def plan_disruptions(view: AppView, pods: list[dict[str, Any]]) -> None:
    """Fills ``view.records`` and ``view.disruptions`` for an app of plain Jobs.

    Args:
        view: The app (its ``jobs`` filled).
        pods: The app's pods.
    """
    for job in view.jobs:
        if not watches_its_pod(job):
            continue
        uid = str(meta_of(job).get("uid"))
        mine = [p for p in pods if owned_by(p, uid)]
        recorded = pod_of_record(job)
        if recorded is None:
            value = pod_to_record(mine)
            if value is not None:
                view.records.append((job, value))
            continue
        lost = lost_pod(recorded, mine)
        if lost is not None:
            view.disruptions.append((job, *lost))


def disruption_failure(
    pod_name: str, node: str, pod_failure: Failure | None, node_exists: bool | None
) -> Failure:
    """Why a recorded pod was deleted under its Job.

    Args:
        pod_name: The pod.
        node: The node it ran on.
        pod_failure: What the pod itself says while it is still there
            (:func:`~.status.pod_failure`: its ``DisruptionTarget`` condition on 1.26+).
        node_exists: Whether the Node still exists (None: it could not be read).

    Returns:
        ``node_lost`` when the Node is gone, the pod's own infrastructure cause when it
        has one, else ``evicted``.
    """
    if node_exists is False:
        why = f"NodeLost: pod {pod_name} was deleted after its node {node} was deleted"
        return Failure(FailureCause.NODE_LOST, why)
    if pod_failure is not None and pod_failure.is_infrastructure:
        return pod_failure
    unread = " (its node could not be read)" if node_exists is None else ""
    return Failure(FailureCause.EVICTED,
                   f"PodDeleted: pod {pod_name} on node {node} was deleted while it ran "
                   f"(the eviction API, a drain, or a delete){unread}")  # fmt: skip


def disrupted_replica(rep: Replica, job: Mapping[str, Any], pods: list[dict[str, Any]]) -> Replica:
    """A replica whose Job tether stopped as disrupted: FAILED with the recorded cause, as a
    Job that failed (tether's own retries apply), once none of the Job's pods runs (never two
    attempts at once: the replacement pod, or the evicted one in its grace period, may).

    Args:
        rep: The replica, its Job's annotations not yet applied.
        job: Its Job.
        pods: The Job's pods.

    Returns:
        ``rep``, updated.
    """
    reason = annotations_of(job).get(ANN_STOP_REASON, DISRUPTED)
    rep.failure = recorded_failure(job) or Failure(FailureCause.EVICTED, reason)
    live = [p for p in pods if _phase(p) not in _ENDED]
    rep.state = AppState.PENDING if live else AppState.FAILED
    rep.msg = f"stopping {len(live)} pod(s) of the Job after: {reason}" if live else reason
    return rep


def killed_by_deletion(pod: Mapping[str, Any], job: Mapping[str, Any]) -> Failure | None:
    """The failure of a pod that ended because it was deleted (not because tether stopped
    its Job: the caller checks that), when its Job failed before tether saw the deletion.

    With a real kubelet the deleted pod's container is killed (exit code 137 or 143) and the
    pod turns Failed before it disappears; a Job controller before 1.26 that sees that
    failure before it replaced the pod fails a ``backoffLimit`` 0 Job with
    ``BackoffLimitExceeded``. The exit code is then the kill's, not the program's: the pod
    was evicted (``PodDeleted``).

    Args:
        pod: The replica's pod.
        job: Its Job.

    Returns:
        ``evicted`` for a Failed pod being deleted whose container ended at or after the
        deletion was asked (``deletionTimestamp`` less the grace period); else None. None
        too when the Job's own deadline (``DeadlineExceeded``) deleted it.
    """
    meta, status = meta_of(pod), pod.get("status") or {}
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is None or _phase(pod) != "Failed":
        return None
    failed = true_conditions(job).get("Failed") or {}
    if failed.get("reason") == "DeadlineExceeded":
        return None
    asked = deleted - timedelta(seconds=to_int(meta.get("deletionGracePeriodSeconds")))
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        ended = parse_time(term.get("finishedAt"))
        if ended is not None and ended >= asked.replace(microsecond=0):
            code = term.get("exitCode")
            return Failure(
                FailureCause.EVICTED,
                f"PodDeleted: pod {meta.get('name')} was deleted while it ran (the eviction "
                f"API, a drain, or a delete); its container was killed, exit code {code}",
                to_int(code) if code is not None else None,
            )
    return None


def encode_failure(failure: Failure) -> str:
    """The ``tether.dev/failure`` annotation's value."""
    return json.dumps({"cause": failure.cause.value, "reason": failure.reason})


def recorded_failure(job: Mapping[str, Any]) -> Failure | None:
    """The failure tether recorded on a Job it stopped as disrupted, if any."""
    try:
        data = json.loads(annotations_of(job).get(ANN_FAILURE) or "null")
        return Failure(FailureCause(data["cause"]), str(data.get("reason") or ""))
    except (ValueError, TypeError, KeyError):
        return None
