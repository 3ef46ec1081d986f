"""Status of a kubernetes app from its objects: the state tables and pure analysis.

:func:`analyze` takes what the apiserver returned for one app (its Jobs, pods, and the Volcano
Job or AppWrapper when there is one) and returns an :class:`AppView`: the app's state and
message, each replica's state, the rebuilt roles, and what the scheduler should do about it
(stop replicas, create the next attempt of a restarted role or app). No I/O happens here, so
every rule is unit-tested on plain dicts; :mod:`tether.schedulers.kubernetes.scheduler`
fetches the objects and performs the actions.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tether.schedulers.kubernetes.naming import (
    ANN_APP_NAME,
    ANN_GANG,
    ANN_IMAGE_PULL_TIMEOUT,
    ANN_JOB_KEY,
    ANN_MAX_RETRIES,
    ANN_MIN_REPLICAS,
    ANN_NUM_REPLICAS,
    ANN_NUM_RESTARTS,
    ANN_PORT_NAMES,
    ANN_RETRY_POLICY,
    ANN_ROLE_INDEX,
    ANN_ROLE_NAME,
    ANN_STOP_REASON,
    ANN_STOPPED,
    ANN_SUBMITTED,
    ANN_UI_URL,
    DEVICE_VOLUME_PREFIX,
    KUEUE_QUEUE_LABEL,
    LABEL_APP_ID,
    LABEL_ATTEMPT,
    LABEL_REPLICA_ID,
    SHM_VOLUME,
    job_name,
)
from tether.schedulers.kubernetes.options import (
    GANG_APPWRAPPER,
    GANG_KUEUE,
    GANG_NONE,
    GANG_VOLCANO,
)
from tether.schedulers.replica import REPLICA_ENV
from tether.specs import (
    NULL_RESOURCE,
    AppState,
    BindMount,
    DeviceMount,
    Mount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)

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

DEFAULT_IMAGE_PULL_TIMEOUT_S = 120
_NOT_TERMINATING = "ContainerCreating", "PodInitializing"


# ---- small helpers -------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("metadata") or {})


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _ann(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(_meta(obj).get("annotations") or {})


def _int(text: Any, default: int = 0) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


def parse_time(text: str | None) -> datetime | None:
    """Parses an RFC 3339 timestamp (any number of fractional digits) as an aware datetime.

    Args:
        text: E.g. ``2024-05-01T10:00:00Z`` or ``2024-05-01T10:00:00.123456789Z``.

    Returns:
        The time, or None for an empty or malformed text.
    """
    if not text:
        return None
    text = text.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    m = re.match(r"^(.*?T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    try:
        ts = datetime.fromisoformat(m.group(1) + frac + m.group(3))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _created(obj: Mapping[str, Any]) -> datetime:
    return parse_time(_meta(obj).get("creationTimestamp")) or datetime.min.replace(
        tzinfo=timezone.utc
    )


def _submitted(obj: Mapping[str, Any]) -> float:
    """When tether submitted the object (its annotation), else its creationTimestamp."""
    try:
        return float(_ann(obj)[ANN_SUBMITTED])
    except (KeyError, ValueError):
        return _created(obj).timestamp()


def _true_conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conds if c.get("status") == "True"}


def _join(reason: str | None, message: str | None) -> str:
    reason, message = (reason or "").strip(), (message or "").strip()
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


# ---- pods ----------------------------------------------------------------------------------
@dataclass
class PodView:
    """What one pod says about its replica.

    Attributes:
        state: The replica state it implies.
        msg: The reason, when there is one worth showing.
        exit_code: The exit code of a terminated container.
        retryable: False for failures a restart cannot fix (image errors).
    """

    state: AppState
    msg: str = ""
    exit_code: int | None = None
    retryable: bool = True


def _termination(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if term:
            code = term.get("exitCode")
            detail = _join(term.get("reason"), term.get("message"))
            text = f"exit code {code}" + (f" ({detail})" if detail else "")
            return (int(code) if code is not None else None), text
    detail = _join(status.get("reason"), status.get("message"))
    return None, detail or "the pod failed"


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
        code, text = _termination(pod)
        return PodView(state, text, code)
    if state == AppState.UNKNOWN:
        detail = _join(status.get("reason"), status.get("message"))
        return PodView(state, f"pod phase {phase}: " + (detail or "its node stopped reporting"))
    statuses = list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )
    if state == AppState.RUNNING:
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff":
                code, text = _termination({"status": {"containerStatuses": [cs]}})
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
            return PodView(state, _join(cond.get("reason") or "Unschedulable", cond.get("message")))
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if not reason or reason in _NOT_TERMINATING:
            continue
        text = _join(reason, waiting.get("message"))
        if reason in IMAGE_ERRORS_FATAL:
            return PodView(AppState.FAILED, text, None, retryable=False)
        if reason in IMAGE_ERRORS_RETRYING:
            since = parse_time(status.get("startTime")) or _created(pod)
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
@dataclass
class RoleMeta:
    """A role as tether rendered it (from the pod template's annotations)."""

    name: str
    index: int
    num_replicas: int
    max_retries: int
    retry_policy: RetryPolicy
    min_replicas: int | None
    template: dict[str, Any]


def role_meta(template: Mapping[str, Any]) -> RoleMeta:
    """Reads a role's metadata from a pod template rendered by tether."""
    ann = _ann(template)
    try:
        policy = RetryPolicy(ann.get(ANN_RETRY_POLICY, "APPLICATION"))
    except ValueError:
        policy = RetryPolicy.APPLICATION
    min_rep = ann.get(ANN_MIN_REPLICAS)
    return RoleMeta(
        name=ann.get(ANN_ROLE_NAME) or str(_labels(template).get("tether.dev/role", "?")),
        index=_int(ann.get(ANN_ROLE_INDEX)),
        num_replicas=_int(ann.get(ANN_NUM_REPLICAS), 1),
        max_retries=_int(ann.get(ANN_MAX_RETRIES)),
        retry_policy=policy,
        min_replicas=_int(min_rep) if min_rep is not None else None,
        template=dict(template),
    )


@dataclass
class Replica:
    """One replica as the objects show it.

    Attributes:
        role: The role's name.
        role_index: The role's index in the app.
        replica_id: The replica index.
        state: Its state.
        msg: Why, when worth saying.
        exit_code: Exit code of its last terminated container.
        hostname: The node it runs on.
        attempt: How many times tether restarted it (Jobs mode).
        job: Its latest Job (Jobs mode).
        pod: Its newest pod.
        retryable: False when a restart cannot help.
        stopped: The ``tether.dev/stopped`` value of its Job, if tether stopped it.
        pod_retries: Pods its latest Job recreated (``REPLICA`` retries).
    """

    role: str
    role_index: int
    replica_id: int
    state: AppState
    msg: str = ""
    exit_code: int | None = None
    hostname: str = ""
    attempt: int = 0
    job: dict[str, Any] | None = None
    pod: dict[str, Any] | None = None
    retryable: bool = True
    stopped: str | None = None
    pod_retries: int = 0

    @property
    def label(self) -> str:
        """``role[k]``."""
        return f"{self.role}[{self.replica_id}]"


_PHASE_RANK = {"Failed": 0, "Succeeded": 1}


def _pod_order(pod: Mapping[str, Any]) -> tuple[datetime, int]:
    """Newest first by creation; creation times have 1 s resolution, so on a tie the pod
    still running (a retry replacing a failed one) beats a succeeded one beats a failed one."""
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    return _created(pod), _PHASE_RANK.get(phase, 2)


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    live = [p for p in pods if not _meta(p).get("deletionTimestamp")] or pods
    return max(live, key=_pod_order) if live else None


def _owned_by(pod: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in _meta(pod).get("ownerReferences") or [])


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
    ann = _ann(job)
    mine = sorted((p for p in pods if _owned_by(p, str(_meta(job).get("uid")))), key=_created)
    pod = _newest(mine)
    status = job.get("status") or {}
    created = sum(_int(status.get(k)) for k in ("succeeded", "failed", "active"))
    rep = Replica(
        role=meta.name,
        role_index=meta.index,
        replica_id=_int(_labels(job).get(LABEL_REPLICA_ID)),
        state=AppState.PENDING,
        attempt=_int(_labels(job).get(LABEL_ATTEMPT)),
        job=job,
        pod=pod,
        hostname=str(((pod or {}).get("spec") or {}).get("nodeName") or ""),
        pod_retries=max(0, max(created, len(mine)) - 1),
    )
    pv = pod_view(pod, now, pull_timeout) if pod is not None else None
    if pv is not None and pv.exit_code is not None:
        rep.exit_code = pv.exit_code
    stopped = ann.get(ANN_STOPPED)
    conds = _true_conditions(job)
    if stopped in STOPPED_STATE:
        rep.stopped = stopped
        rep.state = STOPPED_STATE[stopped]
        rep.msg = ann.get(ANN_STOP_REASON, stopped)
        rep.retryable = False
        return rep
    for ctype in ("Complete", "Failed"):
        if ctype in conds:
            rep.state = JOB_CONDITION_STATE[ctype]
            if ctype == "Failed":
                cond = _join(conds[ctype].get("reason"), conds[ctype].get("message"))
                rep.msg = "; ".join(x for x in ((pv.msg if pv else ""), cond) if x)
            return rep
    if job["spec"].get("suspend"):
        queue = _labels(job).get(KUEUE_QUEUE_LABEL)
        rep.msg = "suspended" + (f": waiting for Kueue admission (queue {queue})" if queue else "")
        return rep
    if pv is None:
        rep.msg = (
            "retrying after a failed pod" if _int(status.get("failed"))
            else "waiting for the Job controller to create the pod"
        )  # fmt: skip
        return rep
    rep.state, rep.msg, rep.retryable = pv.state, pv.msg, pv.retryable
    if pv.state == AppState.FAILED and pv.retryable:
        failed = sum(1 for p in mine if (p.get("status") or {}).get("phase") == "Failed")
        limit = _int(job["spec"].get("backoffLimit"), 6)
        if failed <= limit:
            rep.state = AppState.PENDING
            rep.msg = f"retrying (pod retry {failed} of {limit}) after {pv.msg}"
    return rep


def _pod_replica(
    meta: RoleMeta, k: int, pods: list[dict[str, Any]], now: datetime, pull_timeout: float
) -> Replica:
    pod = _newest(pods)
    rep = Replica(meta.name, meta.index, k, AppState.PENDING, pod=pod)
    if pod is None:
        rep.msg = "no pod yet"
        return rep
    pv = pod_view(pod, now, pull_timeout)
    rep.state, rep.msg, rep.exit_code, rep.retryable = pv.state, pv.msg, pv.exit_code, pv.retryable
    rep.hostname = str((pod.get("spec") or {}).get("nodeName") or "")
    rep.pod_retries = max(0, len(pods) - 1)
    return rep


# ---- the app -------------------------------------------------------------------------------
@dataclass
class AppView:
    """One app as its objects show it, and what to do about it.

    Attributes:
        namespace: Its namespace.
        name: Its Kubernetes name.
        gang: The gang option it was rendered with.
        state: The app's state.
        msg: Why (failed replicas, pending reasons...).
        num_restarts: Restarts by tether plus pod retries.
        replicas: Every replica.
        roles: The roles, rebuilt from the pod templates.
        jobs: Every ``batch/v1`` Job of the app (all attempts).
        vcjob: The Volcano Job, when there is one.
        appwrapper: The AppWrapper, when there is one.
        app_name: ``AppDef.name``.
        job_key: The job identity.
        created: Creation time (seconds since the epoch).
        ui_url: The job's page in a dashboard (the ``dashboard_url`` option), if any.
        stops: ``(object, stopped-kind, reason)`` to stop.
        creates: Jobs to create (next attempts).
    """

    namespace: str
    name: str
    gang: str
    state: AppState
    msg: str
    num_restarts: int
    replicas: list[Replica]
    roles: list[Role]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    vcjob: dict[str, Any] | None = None
    appwrapper: dict[str, Any] | None = None
    app_name: str = ""
    job_key: str | None = None
    created: float | None = None
    ui_url: str | None = None
    stops: list[tuple[dict[str, Any], str, str]] = field(default_factory=list)
    creates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def app_id(self) -> str:
        """``{namespace}:{name}``."""
        return f"{self.namespace}:{self.name}"


def _summary(reps: list[Replica], limit: int = 4) -> str:
    items = [f"{r.label}: {r.msg}" if r.msg else r.label for r in reps]
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _can_restart(rep: Replica, metas: Mapping[str, RoleMeta]) -> bool:
    meta = metas.get(rep.role)
    return (
        meta is not None
        and rep.retryable
        and rep.stopped is None
        and meta.retry_policy != RetryPolicy.REPLICA
        and rep.attempt < meta.max_retries
    )


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
    final = [r for r in failed if not (tether_restarts and _can_restart(r, metas))]
    if final:
        return AppState.FAILED, _summary(final)
    if failed:
        return AppState.PENDING, "restarting after " + _summary(failed)
    if replicas and all(r.state == AppState.SUCCEEDED for r in replicas):
        return AppState.SUCCEEDED, ""
    noted = [r for r in replicas if r.msg and r.state in (AppState.PENDING, AppState.RUNNING)]
    if any(r.state == AppState.RUNNING for r in replicas):
        return AppState.RUNNING, _summary(noted)
    unknown = [r for r in replicas if r.state == AppState.UNKNOWN]
    if unknown:
        return AppState.UNKNOWN, _summary(unknown)
    return AppState.PENDING, _summary(noted)


def _plan(view: AppView, metas: Mapping[str, RoleMeta]) -> None:
    """Fills ``view.stops``/``view.creates`` for an app of plain Jobs."""
    if view.state == AppState.CANCELLED:
        return
    failed = [r for r in view.replicas if r.state == AppState.FAILED and r.stopped is None]
    if not failed:
        return
    final = [r for r in failed if not _can_restart(r, metas)]
    if final:
        reason = _summary(final)
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
    tether_restarts = max([_int(_ann(j).get(ANN_NUM_RESTARTS)) for j in view.jobs] + [0])
    why = "restarting after " + _summary(failed)
    for rep in view.replicas:
        if (rep.role, rep.replica_id) not in scope or rep.job is None:
            continue
        if job_active(rep.job):
            view.stops.append((rep.job, "superseded", why))
        view.creates.append(next_attempt_job(rep.job, rep.attempt + 1, tether_restarts + 1))


def job_active(job: Mapping[str, Any]) -> bool:
    """Whether a ``batch/v1`` Job may still run pods (not finished, not stopped by tether)."""
    if _ann(job).get(ANN_STOPPED):
        return False
    return not ({"Complete", "Failed"} & set(_true_conditions(job)))


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
    meta = _meta(job)
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
        if k not in (ANN_STOPPED, ANN_STOP_REASON) and not k.startswith("batch.kubernetes.io/")
    }
    annotations[ANN_NUM_RESTARTS] = str(num_restarts)
    rmeta = role_meta(spec["template"])
    name = job_name(
        str(labels.get(LABEL_APP_ID, "")), rmeta.name, _int(labels.get(LABEL_REPLICA_ID)), attempt
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
    top = vcjob or appwrapper or (min(jobs, key=_created) if jobs else {})
    ann = _ann(top)
    gang = ann.get(ANN_GANG) or (
        GANG_VOLCANO if vcjob else GANG_APPWRAPPER if appwrapper else GANG_NONE
    )
    pull_timeout = float(_int(ann.get(ANN_IMAGE_PULL_TIMEOUT), DEFAULT_IMAGE_PULL_TIMEOUT_S))
    created = [_submitted(o) for o in [*jobs, *(x for x in (vcjob, appwrapper) if x)]]
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
        key = (meta.name, _int(_labels(job).get(LABEL_REPLICA_ID)))
        cur = latest.get(key)
        if cur is None or _int(_labels(job).get(LABEL_ATTEMPT)) > _int(
            _labels(cur).get(LABEL_ATTEMPT)
        ):
            latest[key] = job
        if meta.name not in metas or key[1] == 0:
            metas[meta.name] = meta
    view.replicas = [job_replica(j, pods, now, pull_timeout) for j in latest.values()]
    tether_owned = view.gang in (GANG_NONE, GANG_KUEUE)
    view.state, view.msg = aggregate(view.replicas, metas, tether_owned)
    view.num_restarts = max(
        [_int(_ann(j).get(ANN_NUM_RESTARTS)) for j in view.jobs] + [0]
    ) + sum(r.pod_retries for r in view.replicas)
    if tether_owned:
        current = {id(j) for j in latest.values()}
        for job in view.jobs:  # an earlier attempt still running next to a newer one
            if id(job) not in current and job_active(job):
                view.stops.append((job, "superseded", "replaced by a newer attempt"))
        _plan(view, metas)
    elif view.state == AppState.FAILED:  # AppWrapper: stop what still runs, MCAD retries
        for rep in view.replicas:
            if rep.job is not None and job_active(rep.job) and rep.state == AppState.FAILED:
                view.stops.append((rep.job, "failed", rep.msg))


def _wrapper_overrides(view: AppView, aw: dict[str, Any]) -> None:
    stopped = _ann(aw).get(ANN_STOPPED)
    aw_state = APPWRAPPER_STATE.get(str((aw.get("status") or {}).get("state") or ""))
    if stopped in STOPPED_STATE:
        view.state, view.msg = STOPPED_STATE[stopped], _ann(aw).get(ANN_STOP_REASON, stopped)
    elif aw_state == AppState.FAILED and not view.state.is_terminal():
        view.state, view.msg = AppState.FAILED, "AppWrapper failed: " + _aw_reason(aw)


def _aw_reason(aw: Mapping[str, Any]) -> str:
    status = aw.get("status") or {}
    conds = status.get("conditions") or []
    last = conds[-1] if conds else {}
    return _join(last.get("reason"), last.get("message")) or str(status.get("state") or "")


def _wrapper_only(view: AppView, aw: dict[str, Any], metas: dict[str, RoleMeta]) -> None:
    items = ((aw.get("spec") or {}).get("resources") or {}).get("GenericItems") or []
    for item in items:
        obj = item.get("generictemplate") or {}
        if obj.get("kind") == "Job":
            meta = role_meta(obj["spec"]["template"])
            if meta.name not in metas:
                metas[meta.name] = meta
            view.replicas.append(
                Replica(meta.name, meta.index, _int(_labels(obj).get(LABEL_REPLICA_ID)),
                        AppState.PENDING, msg="waiting for MCAD to dispatch the AppWrapper")
            )  # fmt: skip
    raw = str((aw.get("status") or {}).get("state") or "")
    state = APPWRAPPER_STATE.get(raw, AppState.UNKNOWN)
    stopped = _ann(aw).get(ANN_STOPPED)
    if stopped in STOPPED_STATE:
        view.state, view.msg = STOPPED_STATE[stopped], _ann(aw).get(ANN_STOP_REASON, stopped)
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
        key = (_ann(pod).get(ANN_ROLE_NAME, ""), _int(_labels(pod).get(LABEL_REPLICA_ID)))
        by_replica.setdefault(key, []).append(pod)
    for task in (vcjob.get("spec") or {}).get("tasks") or []:
        template = task.get("template") or {}
        meta = role_meta(template)
        k = _int(_labels(template).get(LABEL_REPLICA_ID))
        if meta.name not in metas or k == 0:
            metas[meta.name] = meta
        view.replicas.append(
            _pod_replica(meta, k, by_replica.get((meta.name, k), []), now, pull_timeout)
        )
    status = vcjob.get("status") or {}
    phase_info = status.get("state") or {}
    phase = str(phase_info.get("phase") or "Pending")
    view.num_restarts = _int(status.get("retryCount"))
    stopped = _ann(vcjob).get(ANN_STOPPED)
    if stopped in STOPPED_STATE:
        view.state, view.msg = STOPPED_STATE[stopped], _ann(vcjob).get(ANN_STOP_REASON, stopped)
        return
    state = VOLCANO_PHASE_STATE.get(phase)
    if state is None:
        view.state, view.msg = AppState.UNKNOWN, f"unknown Volcano phase {phase!r}"
        return
    detail = _join(phase_info.get("reason"), phase_info.get("message"))
    fatal = [r for r in view.replicas if r.state == AppState.FAILED and not r.retryable]
    if fatal and not state.is_terminal():
        view.state, view.msg = AppState.FAILED, _summary(fatal)
        view.stops.append((vcjob, "failed", view.msg))
        return
    noted = [r for r in view.replicas if r.msg and r.pod is not None]
    if state == AppState.FAILED:
        failed = [r for r in view.replicas if r.state == AppState.FAILED]
        view.msg = "; ".join(x for x in (f"Volcano {phase}", detail, _summary(failed)) if x)
    elif state.is_terminal():
        view.msg = "; ".join(x for x in (f"Volcano {phase}", detail) if x)
    else:
        view.msg = "; ".join(x for x in (detail, _summary(noted)) if x)
    view.state = state


# ---- roles ---------------------------------------------------------------------------------
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z]*)$")
_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def parse_quantity(text: str) -> float:
    """Parses a Kubernetes quantity (``500m``, ``2``, ``1536Mi``, ``1G``).

    Args:
        text: The quantity.

    Returns:
        Its value in base units.

    Raises:
        ValueError: For text that is not a quantity.
    """
    m = _QUANTITY.match(str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _resource(container: Mapping[str, Any], selector: Mapping[str, str]) -> Resource:
    res = container.get("resources") or {}
    limits = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    if not limits:
        base = copy.deepcopy(NULL_RESOURCE)
        base.capabilities = dict(selector)
        return base
    cpu = parse_quantity(limits["cpu"]) if "cpu" in limits else 0.0
    mem = int(parse_quantity(limits["memory"]) / 2**20) if "memory" in limits else 0
    gpu = 0
    devices: dict[str, int] = {}
    for key, val in limits.items():
        if key in ("cpu", "memory", "ephemeral-storage") or "/" not in key:
            continue
        if key.endswith("/gpu"):
            gpu += int(parse_quantity(val))
        else:
            devices[key] = int(parse_quantity(val))
    return Resource(
        cpu=round(cpu, 3), gpu=gpu, memMB=mem, capabilities=dict(selector), devices=devices
    )


def _mounts(spec: Mapping[str, Any], container: Mapping[str, Any]) -> list[Mount]:
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    out: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm.get("name")) or {}
        ro = bool(vm.get("readOnly", False))
        if vm.get("name") == SHM_VOLUME:
            continue
        if "persistentVolumeClaim" in vol:
            out.append(VolumeMount(vol["persistentVolumeClaim"]["claimName"], vm["mountPath"], ro))
        elif "hostPath" in vol and str(vm.get("name", "")).startswith(DEVICE_VOLUME_PREFIX):
            out.append(DeviceMount(vol["hostPath"]["path"], vm["mountPath"], "r" if ro else "rwm"))
        elif "hostPath" in vol:
            out.append(BindMount(vol["hostPath"]["path"], vm["mountPath"], ro))
    return out


def rebuild_role(meta: RoleMeta) -> Role:
    """Rebuilds a :class:`Role` from the pod template tether rendered (replica 0's values).

    Args:
        meta: The role's metadata and template.

    Returns:
        The role (macros appear substituted for replica 0; tether's own env vars dropped).
    """
    spec = meta.template.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    command = list(container.get("command") or []) + list(container.get("args") or [])
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env") or []
        if e.get("name") not in REPLICA_ENV and "valueFrom" not in e
    }
    renamed = dict(
        pair.split("=", 1)
        for pair in _ann(meta.template).get(ANN_PORT_NAMES, "").split(",")
        if "=" in pair
    )
    ports = {
        renamed.get(str(p.get("name")), str(p.get("name"))): int(p["containerPort"])
        for p in container.get("ports") or []
    }
    return Role(
        name=meta.name,
        image=str(container.get("image", "")),
        entrypoint=command[0] if command else "",
        args=command[1:],
        env=env,
        num_replicas=meta.num_replicas,
        min_replicas=meta.min_replicas,
        max_retries=meta.max_retries,
        retry_policy=meta.retry_policy,
        resource=_resource(container, spec.get("nodeSelector") or {}),
        port_map=ports,
        mounts=_mounts(spec, container),
    )
