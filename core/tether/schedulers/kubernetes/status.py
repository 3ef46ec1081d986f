"""Status of a kubernetes app from its objects: the one native -> AppState table.

The state tables (:data:`POD_PHASE_STATE`, :data:`JOB_CONDITION_STATE`,
:data:`STOPPED_STATE`, :data:`VOLCANO_PHASE_STATE`, :data:`APPWRAPPER_STATE`) and the
functions that apply them. :func:`analyze` takes what the apiserver returned for one app (its
Jobs, pods, and the Volcano Job or AppWrapper when there is one) and returns an
:class:`~tether.schedulers.kubernetes.views.AppView`: the app's state and message, each
replica's state, the rebuilt roles (:mod:`~tether.schedulers.kubernetes.roles`), and what
the scheduler should do about it (stop replicas, create the next attempt of a restarted
role or app, planned by :mod:`~tether.schedulers.kubernetes.reconcile`). No I/O happens
here, so every rule is unit-tested on plain dicts;
:mod:`tether.schedulers.kubernetes.scheduler` fetches the objects and performs the actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tether.schedulers.kubernetes.disruption import (
    DISRUPTED,
    disrupted_replica,
    killed_by_deletion,
    plan_disruptions,
)
from tether.schedulers.kubernetes.fields import (
    annotations_of,
    created_at,
    join_reason,
    labels_of,
    meta_of,
    parse_time,
    submitted_at,
    to_int,
    true_conditions,
)
from tether.schedulers.kubernetes.naming import (
    ANN_APP_NAME,
    ANN_GANG,
    ANN_IMAGE_PULL_TIMEOUT,
    ANN_JOB_KEY,
    ANN_NUM_RESTARTS,
    ANN_ROLE_NAME,
    ANN_STOP_REASON,
    ANN_STOPPED,
    ANN_UI_URL,
    KUEUE_QUEUE_LABEL,
    LABEL_ATTEMPT,
    LABEL_REPLICA_ID,
)
from tether.schedulers.kubernetes.options import (
    GANG_APPWRAPPER,
    GANG_KUEUE,
    GANG_NONE,
    GANG_VOLCANO,
)
from tether.schedulers.kubernetes.pods import newest_pod, owned_by, termination
from tether.schedulers.kubernetes.reconcile import can_restart, job_active, plan_actions
from tether.schedulers.kubernetes.roles import RoleMeta, rebuild_role, role_meta
from tether.schedulers.kubernetes.views import AppView, Replica, summary
from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause, application_failure

# ---- state tables --------------------------------------------------------------------------
POD_PHASE_STATE: dict[str, AppState] = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Unknown": AppState.UNKNOWN,
}
"""Pod phase -> replica state, refined by :func:`pod_view`: ``PodScheduled=False`` stays
PENDING with the scheduler's reason; a container waiting with a reason in
:data:`IMAGE_ERRORS_FATAL` is FAILED at once, one in :data:`IMAGE_ERRORS_RETRYING` is PENDING
until it persisted ``image_pull_timeout`` seconds, then FAILED; ``CrashLoopBackOff`` stays
RUNNING with the reason and restart count in the message."""

JOB_CONDITION_STATE: dict[str, AppState] = {
    "Complete": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Suspended": AppState.PENDING,
}
"""A true ``batch/v1`` Job condition -> replica state (no condition: its newest pod decides)."""

STOPPED_STATE: dict[str, AppState] = {
    "cancelled": AppState.CANCELLED,
    "failed": AppState.FAILED,
    "superseded": AppState.CANCELLED,
    "disrupted": AppState.FAILED,
}
"""The ``tether.dev/stopped`` annotation tether puts on what it stopped -> state."""

VOLCANO_PHASE_STATE: dict[str, AppState] = {
    "Pending": AppState.PENDING,
    "Restarting": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Completing": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Terminating": AppState.FAILED,
    "Terminated": AppState.FAILED,
    "Failed": AppState.FAILED,
    "Aborting": AppState.CANCELLED,
    "Aborted": AppState.CANCELLED,
}
"""Volcano Job ``status.state.phase`` -> app state. tether renders a ``TerminateJob`` policy
for roles without retries, so Terminating/Terminated mean "a replica failed"."""

APPWRAPPER_STATE: dict[str, AppState] = {
    "": AppState.PENDING,
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "RunningHoldCompletion": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Deleted": AppState.CANCELLED,
}
"""MCAD AppWrapper ``status.state`` -> app state (once its Jobs exist, they decide)."""

IMAGE_ERRORS_FATAL = frozenset({"InvalidImageName", "ErrImageNeverPull"})
"""Waiting reasons that no retry can fix: FAILED at once."""
IMAGE_ERRORS_RETRYING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"})
"""Waiting reasons the kubelet retries: PENDING with the reason, FAILED after the timeout."""

DISRUPTION_CAUSE: dict[str, FailureCause] = {
    "PreemptionByScheduler": FailureCause.PREEMPTED,
    "PreemptionByKubeScheduler": FailureCause.PREEMPTED,
    "DeletionByTaintManager": FailureCause.NODE_LOST,
    "DeletionByPodGC": FailureCause.NODE_LOST,
    "EvictionByEvictionAPI": FailureCause.EVICTED,
    "TerminationByKubelet": FailureCause.EVICTED,
}
"""The reason of a pod's ``DisruptionTarget`` condition (Kubernetes 1.26+) -> cause."""

POD_REASON_CAUSE: dict[str, FailureCause] = {
    "Evicted": FailureCause.EVICTED,
    "NodeLost": FailureCause.NODE_LOST,
    "Preempting": FailureCause.PREEMPTED,
    "Terminated": FailureCause.HOST_TERMINATED,
    "Shutdown": FailureCause.HOST_TERMINATED,
    "NodeShutdown": FailureCause.HOST_TERMINATED,
    "NodeAffinity": FailureCause.OUT_OF_CAPACITY,
    "UnexpectedAdmissionError": FailureCause.OUT_OF_CAPACITY,
}
"""A pod's ``status.reason`` -> cause: kubelet evictions (node pressure), a node lost, a
graceful node shutdown (``Terminated``), and kubelet admission refusals (also every
``OutOf<resource>`` reason, e.g. ``OutOfcpu``, which is out of capacity)."""

DEFAULT_IMAGE_PULL_TIMEOUT_S = 120
_NOT_TERMINATING = "ContainerCreating", "PodInitializing"


# ---- pods ----------------------------------------------------------------------------------
@dataclass
class PodView:
    """What one pod says about its replica.

    Attributes:
        state: The replica state it implies.
        msg: The reason, when there is one worth showing.
        exit_code: The exit code of a terminated container.
        retryable: False for failures a restart cannot fix (image errors).
        failure: Why it failed, or why it cannot be placed (see :func:`pod_failure`).
    """

    state: AppState
    msg: str = ""
    exit_code: int | None = None
    retryable: bool = True
    failure: Failure | None = None


def pod_failure(pod: Mapping[str, Any]) -> Failure | None:
    """Why a pod failed, or why it cannot be placed: the one Kubernetes cause table.

    In order: a true ``DisruptionTarget`` condition (:data:`DISRUPTION_CAUSE`), the pod's
    ``status.reason`` (:data:`POD_REASON_CAUSE`, ``OutOf*``), a ``PodScheduled=False``
    condition (out of capacity), a container ``OOMKilled``, a container's exit code
    (application). None for a pod that neither failed nor waits for a place.

    Args:
        pod: The pod object.

    Returns:
        The failure, with the native reason.
    """
    status = pod.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    target = conds.get("DisruptionTarget")
    if target is not None:
        reason = str(target.get("reason") or "")
        native = "DisruptionTarget: " + join_reason(reason, target.get("message"))
        return Failure(DISRUPTION_CAUSE.get(reason, FailureCause.EVICTED), native)
    reason = str(status.get("reason") or "")
    cause = POD_REASON_CAUSE.get(reason) or (
        FailureCause.OUT_OF_CAPACITY if reason.startswith("OutOf") else None
    )
    if cause is not None:
        return Failure(cause, join_reason(reason, status.get("message")))
    phase = str(status.get("phase") or "Pending")
    if phase == "Pending":
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                text = join_reason(cond.get("reason") or "Unschedulable", cond.get("message"))
                return Failure(FailureCause.OUT_OF_CAPACITY, text)
        return None
    if phase != "Failed":
        return None
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("reason") == "OOMKilled":
            return Failure(FailureCause.OOM_KILLED, "OOMKilled", to_int(term.get("exitCode")))
    code, text = termination(pod)
    return application_failure(code, text)


def pod_view(pod: Mapping[str, Any], now: datetime, image_pull_timeout: float) -> PodView:
    """The replica state one pod implies (see :data:`POD_PHASE_STATE`).

    Args:
        pod: The pod object.
        now: The current time (aware).
        image_pull_timeout: Seconds an image pull may keep failing before FAILED.

    Returns:
        The view.
    """
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    state = POD_PHASE_STATE.get(phase, AppState.UNKNOWN)
    if state == AppState.SUCCEEDED:
        return PodView(state, "", 0)
    if state == AppState.FAILED:
        code, text = termination(pod)
        return PodView(state, text, code, failure=pod_failure(pod))
    if state == AppState.UNKNOWN:
        detail = join_reason(status.get("reason"), status.get("message"))
        return PodView(
            state,
            f"pod phase {phase}: " + (detail or "its node stopped reporting"),
            failure=pod_failure(pod),
        )
    statuses = list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )
    if state == AppState.RUNNING:
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff":
                code, text = termination({"status": {"containerStatuses": [cs]}})
                return PodView(
                    state,
                    f"CrashLoopBackOff: container {cs.get('name')} restarted "
                    f"{cs.get('restartCount', 0)} times, last {text}",
                    code,
                )
        return PodView(state)
    # Pending
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return PodView(
                state,
                join_reason(cond.get("reason") or "Unschedulable", cond.get("message")),
                failure=pod_failure(pod),
            )
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if not reason or reason in _NOT_TERMINATING:
            continue
        text = join_reason(reason, waiting.get("message"))
        if reason in IMAGE_ERRORS_FATAL:
            return PodView(AppState.FAILED, text, None, retryable=False)
        if reason in IMAGE_ERRORS_RETRYING:
            since = parse_time(status.get("startTime")) or created_at(pod)
            waited = (now - since).total_seconds()
            if waited >= image_pull_timeout:
                return PodView(
                    AppState.FAILED,
                    f"{text} (image {cs.get('image', '')!r} not pulled after {waited:.0f}s, "
                    f"image_pull_timeout={image_pull_timeout:g}s)",
                    None,
                    retryable=False,
                )
        return PodView(state, text)
    return PodView(state)


# ---- replicas ------------------------------------------------------------------------------
def job_replica(
    job: dict[str, Any], pods: list[dict[str, Any]], now: datetime, pull_timeout: float
) -> Replica:
    """The state of the replica a ``batch/v1`` Job runs (see :data:`JOB_CONDITION_STATE`).

    Args:
        job: The Job (latest attempt of the replica).
        pods: Pods of the app (those owned by the Job are used).
        now: The current time.
        pull_timeout: ``image_pull_timeout`` in seconds.

    Returns:
        The replica.
    """
    meta = role_meta(job["spec"]["template"])
    ann = annotations_of(job)
    mine = sorted((p for p in pods if owned_by(p, str(meta_of(job).get("uid")))), key=created_at)
    pod = newest_pod(mine)
    status = job.get("status") or {}
    created = sum(to_int(status.get(k)) for k in ("succeeded", "failed", "active"))
    rep = Replica(
        role=meta.name,
        role_index=meta.index,
        replica_id=to_int(labels_of(job).get(LABEL_REPLICA_ID)),
        state=AppState.PENDING,
        attempt=to_int(labels_of(job).get(LABEL_ATTEMPT)),
        job=job,
        pod=pod,
        hostname=str(((pod or {}).get("spec") or {}).get("nodeName") or ""),
        pod_retries=max(0, max(created, len(mine)) - 1),
    )
    pv = pod_view(pod, now, pull_timeout) if pod is not None else None
    if pv is not None and pv.exit_code is not None:
        rep.exit_code = pv.exit_code
    if pv is not None:
        rep.failure = pv.failure
    stopped = ann.get(ANN_STOPPED)
    conds = true_conditions(job)
    if stopped == DISRUPTED:
        return disrupted_replica(rep, job, mine)
    if stopped in STOPPED_STATE:
        rep.stopped = stopped
        rep.state = STOPPED_STATE[stopped]
        rep.msg = ann.get(ANN_STOP_REASON, stopped)
        rep.retryable = False
        return rep
    if pod is not None and rep.failure is not None and not rep.failure.is_infrastructure:
        rep.failure = killed_by_deletion(pod, job) or rep.failure
    for ctype in ("Complete", "Failed"):
        if ctype in conds:
            rep.state = JOB_CONDITION_STATE[ctype]
            if ctype == "Failed":
                cond = join_reason(conds[ctype].get("reason"), conds[ctype].get("message"))
                rep.msg = "; ".join(x for x in ((pv.msg if pv else ""), cond) if x)
                if rep.failure is None:
                    rep.failure = Failure(FailureCause.UNKNOWN, cond)
            return rep
    if job["spec"].get("suspend"):
        queue = labels_of(job).get(KUEUE_QUEUE_LABEL)
        rep.msg = "suspended" + (f": waiting for Kueue admission (queue {queue})" if queue else "")
        return rep
    if pv is None:
        rep.msg = (
            "retrying after a failed pod" if to_int(status.get("failed"))
            else "waiting for the Job controller to create the pod"
        )  # fmt: skip
        return rep
    rep.state, rep.msg, rep.retryable = pv.state, pv.msg, pv.retryable
    if pv.state == AppState.FAILED and pv.retryable:
        failed = sum(1 for p in mine if (p.get("status") or {}).get("phase") == "Failed")
        limit = to_int(job["spec"].get("backoffLimit"), 6)
        if failed <= limit:
            rep.state = AppState.PENDING
            rep.msg = f"retrying (pod retry {failed} of {limit}) after {pv.msg}"
    return rep


def _pod_replica(
    meta: RoleMeta, k: int, pods: list[dict[str, Any]], now: datetime, pull_timeout: float
) -> Replica:
    pod = newest_pod(pods)
    rep = Replica(meta.name, meta.index, k, AppState.PENDING, pod=pod)
    if pod is None:
        rep.msg = "no pod yet"
        return rep
    pv = pod_view(pod, now, pull_timeout)
    rep.state, rep.msg, rep.exit_code, rep.retryable = pv.state, pv.msg, pv.exit_code, pv.retryable
    rep.failure = pv.failure
    rep.hostname = str((pod.get("spec") or {}).get("nodeName") or "")
    rep.pod_retries = max(0, len(pods) - 1)
    return rep


# ---- the app -------------------------------------------------------------------------------
def aggregate(
    replicas: list[Replica], metas: Mapping[str, RoleMeta], tether_restarts: bool
) -> tuple[AppState, str]:
    """The app's state from its replicas.

    CANCELLED when tether cancelled it; FAILED when a replica failed for good; PENDING
    ("restarting") when every failure can still be retried by tether; SUCCEEDED when all
    succeeded; RUNNING when any runs; UNKNOWN when a replica's state is unknown; else PENDING.

    Args:
        replicas: The replicas.
        metas: Role metadata by role name.
        tether_restarts: Whether tether restarts roles/apps (plain Jobs).

    Returns:
        The state and message.
    """
    if any(r.stopped == "cancelled" for r in replicas):
        return AppState.CANCELLED, "cancelled by the user"
    failed = [r for r in replicas if r.state == AppState.FAILED]
    final = [r for r in failed if not (tether_restarts and can_restart(r, metas))]
    if final:
        return AppState.FAILED, summary(final)
    if failed:
        return AppState.PENDING, "restarting after " + summary(failed)
    if replicas and all(r.state == AppState.SUCCEEDED for r in replicas):
        return AppState.SUCCEEDED, ""
    noted = [r for r in replicas if r.msg and r.state in (AppState.PENDING, AppState.RUNNING)]
    if any(r.state == AppState.RUNNING for r in replicas):
        return AppState.RUNNING, summary(noted)
    unknown = [r for r in replicas if r.state == AppState.UNKNOWN]
    if unknown:
        return AppState.UNKNOWN, summary(unknown)
    return AppState.PENDING, summary(noted)


def analyze(
    namespace: str,
    name: str,
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    vcjob: dict[str, Any] | None,
    appwrapper: dict[str, Any] | None,
    now: datetime,
) -> AppView:
    """The app's status and the actions it needs, from its objects.

    Args:
        namespace: The namespace.
        name: The app's Kubernetes name.
        jobs: Its ``batch/v1`` Jobs (every attempt).
        pods: Its pods.
        vcjob: Its Volcano Job, if any.
        appwrapper: Its AppWrapper, if any.
        now: The current time (aware).

    Returns:
        The view (with ``stops``/``creates`` filled for plain Jobs).
    """
    top = vcjob or appwrapper or (min(jobs, key=created_at) if jobs else {})
    ann = annotations_of(top)
    gang = ann.get(ANN_GANG) or (
        GANG_VOLCANO if vcjob else GANG_APPWRAPPER if appwrapper else GANG_NONE
    )
    pull_timeout = float(to_int(ann.get(ANN_IMAGE_PULL_TIMEOUT), DEFAULT_IMAGE_PULL_TIMEOUT_S))
    created = [submitted_at(o) for o in [*jobs, *(x for x in (vcjob, appwrapper) if x)]]
    view = AppView(
        namespace=namespace,
        name=name,
        gang=gang,
        state=AppState.UNKNOWN,
        msg="",
        num_restarts=0,
        replicas=[],
        roles=[],
        jobs=list(jobs),
        vcjob=vcjob,
        appwrapper=appwrapper,
        app_name=ann.get(ANN_APP_NAME, name),
        job_key=ann.get(ANN_JOB_KEY),
        created=min(created) if created else None,
        ui_url=ann.get(ANN_UI_URL),
    )
    metas: dict[str, RoleMeta] = {}
    if vcjob is not None:
        _volcano(view, vcjob, pods, now, pull_timeout, metas)
    elif jobs:
        _jobs(view, pods, now, pull_timeout, metas)
        if appwrapper is not None:
            _wrapper_overrides(view, appwrapper)
    elif appwrapper is not None:
        _wrapper_only(view, appwrapper, metas)
    view.roles = [rebuild_role(m) for m in sorted(metas.values(), key=lambda m: m.index)]
    return view


def _jobs(
    view: AppView,
    pods: list[dict[str, Any]],
    now: datetime,
    pull_timeout: float,
    metas: dict[str, RoleMeta],
) -> None:
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for job in view.jobs:
        meta = role_meta(job["spec"]["template"])
        key = (meta.name, to_int(labels_of(job).get(LABEL_REPLICA_ID)))
        cur = latest.get(key)
        if cur is None or to_int(labels_of(job).get(LABEL_ATTEMPT)) > to_int(
            labels_of(cur).get(LABEL_ATTEMPT)
        ):
            latest[key] = job
        if meta.name not in metas or key[1] == 0:
            metas[meta.name] = meta
    view.replicas = [job_replica(j, pods, now, pull_timeout) for j in latest.values()]
    tether_owned = view.gang in (GANG_NONE, GANG_KUEUE)
    view.state, view.msg = aggregate(view.replicas, metas, tether_owned)
    view.num_restarts = max(
        [to_int(annotations_of(j).get(ANN_NUM_RESTARTS)) for j in view.jobs] + [0]
    ) + sum(r.pod_retries for r in view.replicas)
    if tether_owned:
        current = {id(j) for j in latest.values()}
        for job in view.jobs:  # an earlier attempt still running next to a newer one
            if id(job) not in current and job_active(job):
                view.stops.append((job, "superseded", "replaced by a newer attempt"))
        plan_actions(view, metas)
        if view.gang == GANG_NONE:  # Kueue deletes the pods of a Job it preempts itself
            plan_disruptions(view, pods)
    elif view.state == AppState.FAILED:  # AppWrapper: stop what still runs, MCAD retries
        for rep in view.replicas:
            if rep.job is not None and job_active(rep.job) and rep.state == AppState.FAILED:
                view.stops.append((rep.job, "failed", rep.msg))


def _wrapper_overrides(view: AppView, aw: dict[str, Any]) -> None:
    stopped = annotations_of(aw).get(ANN_STOPPED)
    aw_state = APPWRAPPER_STATE.get(str((aw.get("status") or {}).get("state") or ""))
    if stopped in STOPPED_STATE:
        view.state, view.msg = (
            STOPPED_STATE[stopped],
            annotations_of(aw).get(ANN_STOP_REASON, stopped),
        )
    elif aw_state == AppState.FAILED and not view.state.is_terminal():
        view.state, view.msg = AppState.FAILED, "AppWrapper failed: " + _aw_reason(aw)


def _aw_reason(aw: Mapping[str, Any]) -> str:
    status = aw.get("status") or {}
    conds = status.get("conditions") or []
    last = conds[-1] if conds else {}
    return join_reason(last.get("reason"), last.get("message")) or str(status.get("state") or "")


def _wrapper_only(view: AppView, aw: dict[str, Any], metas: dict[str, RoleMeta]) -> None:
    items = ((aw.get("spec") or {}).get("resources") or {}).get("GenericItems") or []
    for item in items:
        obj = item.get("generictemplate") or {}
        if obj.get("kind") == "Job":
            meta = role_meta(obj["spec"]["template"])
            if meta.name not in metas:
                metas[meta.name] = meta
            view.replicas.append(
                Replica(meta.name, meta.index, to_int(labels_of(obj).get(LABEL_REPLICA_ID)),
                        AppState.PENDING, msg="waiting for MCAD to dispatch the AppWrapper")
            )  # fmt: skip
    raw = str((aw.get("status") or {}).get("state") or "")
    state = APPWRAPPER_STATE.get(raw, AppState.UNKNOWN)
    stopped = annotations_of(aw).get(ANN_STOPPED)
    if stopped in STOPPED_STATE:
        view.state, view.msg = (
            STOPPED_STATE[stopped],
            annotations_of(aw).get(ANN_STOP_REASON, stopped),
        )
    elif state == AppState.UNKNOWN:
        view.state, view.msg = state, f"unknown AppWrapper state {raw!r}"
    else:
        view.state = state
        view.msg = f"AppWrapper {raw or 'Pending'}: " + (
            _aw_reason(aw) if state == AppState.FAILED else "waiting for MCAD to dispatch it"
        )
    for rep in view.replicas:
        rep.state = view.state if view.state.is_terminal() else AppState.PENDING


def _volcano(
    view: AppView,
    vcjob: dict[str, Any],
    pods: list[dict[str, Any]],
    now: datetime,
    pull_timeout: float,
    metas: dict[str, RoleMeta],
) -> None:
    by_replica: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for pod in pods:
        key = (
            annotations_of(pod).get(ANN_ROLE_NAME, ""),
            to_int(labels_of(pod).get(LABEL_REPLICA_ID)),
        )
        by_replica.setdefault(key, []).append(pod)
    for task in (vcjob.get("spec") or {}).get("tasks") or []:
        template = task.get("template") or {}
        meta = role_meta(template)
        k = to_int(labels_of(template).get(LABEL_REPLICA_ID))
        if meta.name not in metas or k == 0:
            metas[meta.name] = meta
        view.replicas.append(
            _pod_replica(meta, k, by_replica.get((meta.name, k), []), now, pull_timeout)
        )
    status = vcjob.get("status") or {}
    phase_info = status.get("state") or {}
    phase = str(phase_info.get("phase") or "Pending")
    view.num_restarts = to_int(status.get("retryCount"))
    stopped = annotations_of(vcjob).get(ANN_STOPPED)
    if stopped in STOPPED_STATE:
        view.state, view.msg = (
            STOPPED_STATE[stopped],
            annotations_of(vcjob).get(ANN_STOP_REASON, stopped),
        )
        return
    state = VOLCANO_PHASE_STATE.get(phase)
    if state is None:
        view.state, view.msg = AppState.UNKNOWN, f"unknown Volcano phase {phase!r}"
        return
    detail = join_reason(phase_info.get("reason"), phase_info.get("message"))
    fatal = [r for r in view.replicas if r.state == AppState.FAILED and not r.retryable]
    if fatal and not state.is_terminal():
        view.state, view.msg = AppState.FAILED, summary(fatal)
        view.stops.append((vcjob, "failed", view.msg))
        return
    noted = [r for r in view.replicas if r.msg and r.pod is not None]
    if state == AppState.FAILED:
        failed = [r for r in view.replicas if r.state == AppState.FAILED]
        view.msg = "; ".join(x for x in (f"Volcano {phase}", detail, summary(failed)) if x)
    elif state.is_terminal():
        view.msg = "; ".join(x for x in (f"Volcano {phase}", detail) if x)
    else:
        view.msg = "; ".join(x for x in (detail, summary(noted)) if x)
    view.state = state
