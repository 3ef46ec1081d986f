"""What reconcile does to an app, planned without I/O: restarts and stops.

tether restarts replicas itself for the ``ROLE`` and ``APPLICATION`` retry policies (plain
Jobs and Kueue): :func:`plan_actions` fills an :class:`~.views.AppView`'s ``creates`` (the
next attempt of each replica due a restart, see :func:`next_attempt_job`) and ``stops`` (the
old attempts, or every replica after a final failure);
:meth:`~tether.schedulers.kubernetes.scheduler.KubernetesScheduler.reconcile` performs them
(:func:`~tether.schedulers.kubernetes.actions.apply_actions`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tether.schedulers.kubernetes.fields import annotations_of, meta_of, to_int, true_conditions
from tether.schedulers.kubernetes.naming import (
    ANN_FAILURE,
    ANN_NUM_RESTARTS,
    ANN_POD,
    ANN_STOP_REASON,
    ANN_STOPPED,
    KUEUE_QUEUE_LABEL,
    LABEL_APP_ID,
    LABEL_ATTEMPT,
    LABEL_REPLICA_ID,
    job_name,
)
from tether.schedulers.kubernetes.roles import RoleMeta, role_meta
from tether.schedulers.kubernetes.views import AppView, Replica, summary
from tether.schedulers.retries import application_retries
from tether.specs import AppState, RetryPolicy


def can_restart(rep: Replica, metas: Mapping[str, RoleMeta]) -> bool:
    """Whether tether may restart a failed replica: its role has retries left, or, for an
    ``APPLICATION`` role, the app has (see :mod:`tether.schedulers.retries`)."""
    meta = metas.get(rep.role)
    if meta is None or meta.retry_policy == RetryPolicy.REPLICA:
        return False
    budget = (
        application_retries(metas.values())
        if meta.retry_policy == RetryPolicy.APPLICATION
        else meta.max_retries
    )
    return rep.retryable and rep.stopped is None and rep.attempt < budget


def plan_actions(view: AppView, metas: Mapping[str, RoleMeta]) -> None:
    """Fills ``view.stops``/``view.creates`` for an app of plain Jobs.

    Args:
        view: The app, its state and replicas already analyzed.
        metas: Role metadata by role name.
    """
    if view.state == AppState.CANCELLED:
        return
    failed = [r for r in view.replicas if r.state == AppState.FAILED and r.stopped is None]
    if not failed:
        return
    final = [r for r in failed if not can_restart(r, metas)]
    if final:
        reason = summary(final)
        for rep in view.replicas:
            if rep.job is None or not job_active(rep.job):
                continue
            if rep in final:
                view.stops.append((rep.job, "failed", rep.msg))
            else:
                view.stops.append((rep.job, "superseded", f"stopped because {reason} failed"))
        return
    scope: set[tuple[str, int]] = set()
    for rep in failed:
        meta = metas[rep.role]
        if meta.retry_policy == RetryPolicy.ROLE:
            scope |= {(r.role, r.replica_id) for r in view.replicas if r.role == rep.role}
        else:
            scope |= {(r.role, r.replica_id) for r in view.replicas}
    tether_restarts = max(
        [to_int(annotations_of(j).get(ANN_NUM_RESTARTS)) for j in view.jobs] + [0]
    )
    why = "restarting after " + summary(failed)
    for rep in view.replicas:
        if (rep.role, rep.replica_id) not in scope or rep.job is None:
            continue
        if job_active(rep.job):
            view.stops.append((rep.job, "superseded", why))
        view.creates.append(next_attempt_job(rep.job, rep.attempt + 1, tether_restarts + 1))


def job_active(job: Mapping[str, Any]) -> bool:
    """Whether a ``batch/v1`` Job may still run pods (not finished, not stopped by tether)."""
    if annotations_of(job).get(ANN_STOPPED):
        return False
    return not ({"Complete", "Failed"} & set(true_conditions(job)))


_CONTROLLER_LABELS = (
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
)


def next_attempt_job(job: Mapping[str, Any], attempt: int, num_restarts: int) -> dict[str, Any]:
    """A copy of a replica's Job for its next attempt (tether-side restart).

    Args:
        job: The replica's current Job, as the apiserver returned it.
        attempt: The new attempt number.
        num_restarts: The app's restart count after this restart.

    Returns:
        The Job manifest to create.
    """
    meta = meta_of(job)
    spec = copy.deepcopy(dict(job["spec"]))
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    spec.pop("activeDeadlineSeconds", None)
    spec["parallelism"] = 1
    tmeta = dict(spec["template"].get("metadata") or {})
    tmeta["labels"] = {
        k: v for k, v in (tmeta.get("labels") or {}).items() if k not in _CONTROLLER_LABELS
    }
    tmeta.pop("creationTimestamp", None)
    spec["template"]["metadata"] = tmeta
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _CONTROLLER_LABELS}
    labels[LABEL_ATTEMPT] = str(attempt)
    if labels.get(KUEUE_QUEUE_LABEL):
        spec["suspend"] = True
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k not in (ANN_STOPPED, ANN_STOP_REASON, ANN_POD, ANN_FAILURE)
        and not k.startswith("batch.kubernetes.io/")
    }
    annotations[ANN_NUM_RESTARTS] = str(num_restarts)
    rmeta = role_meta(spec["template"])
    name = job_name(
        str(labels.get(LABEL_APP_ID, "")), rmeta.name, to_int(labels.get(LABEL_REPLICA_ID)), attempt
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
