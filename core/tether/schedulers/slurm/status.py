"""Slurm job states -> :class:`~tether.specs.AppState`: the one table, and the app's view.

:data:`SLURM_STATE` maps every base job state Slurm reports (``squeue``'s ``job_state``,
``sacct``'s ``State``) to an app state. :func:`analyze` combines the records of a job (one per
component of a heterogeneous job) into what ``describe`` returns, with Slurm's reason in the
message (``Resources``, ``Priority``, ``PartitionTimeLimit``, ``NonZeroExitCode``...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.schedulers.slurm.render import Marker, log_stems, parse_comment
from tether.specs import AppState, ReplicaStatus, Role, RoleStatus
from tether.specs.failures import Failure, FailureCause

SLURM_STATE: dict[str, AppState] = {
    "PENDING": AppState.PENDING,
    "CONFIGURING": AppState.PENDING,  # nodes booting
    "REQUEUED": AppState.PENDING,
    "REQUEUE_HOLD": AppState.PENDING,
    "REQUEUE_FED": AppState.PENDING,
    "RESV_DEL_HOLD": AppState.PENDING,
    "SUSPENDED": AppState.PENDING,  # stopped by the scheduler; resumes later
    "RUNNING": AppState.RUNNING,
    "COMPLETING": AppState.RUNNING,  # tasks done, nodes being released
    "RESIZING": AppState.RUNNING,
    "SIGNALING": AppState.RUNNING,
    "STAGE_OUT": AppState.RUNNING,
    "STOPPED": AppState.RUNNING,  # SIGSTOPped, keeps its nodes
    "COMPLETED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "TIMEOUT": AppState.FAILED,
    "NODE_FAIL": AppState.FAILED,
    "PREEMPTED": AppState.FAILED,
    "OUT_OF_MEMORY": AppState.FAILED,
    "BOOT_FAIL": AppState.FAILED,
    "DEADLINE": AppState.FAILED,
    "SPECIAL_EXIT": AppState.FAILED,
    "CANCELLED": AppState.CANCELLED,
    "REVOKED": AppState.CANCELLED,  # a federation sibling started it elsewhere
}
"""Slurm base job state -> app state."""

STATE_CAUSE: dict[str, FailureCause] = {
    "PREEMPTED": FailureCause.PREEMPTED,
    "NODE_FAIL": FailureCause.NODE_LOST,
    "BOOT_FAIL": FailureCause.OUT_OF_CAPACITY,
    "OUT_OF_MEMORY": FailureCause.OOM_KILLED,
    "FAILED": FailureCause.APPLICATION,
    "TIMEOUT": FailureCause.APPLICATION,
    "DEADLINE": FailureCause.APPLICATION,
    "SPECIAL_EXIT": FailureCause.APPLICATION,
}
"""Slurm base state of a FAILED job -> cause: preemption, a failed node and a node that did
not boot are the infrastructure's; a non-zero exit, the job's own time limit or deadline and
``SPECIAL_EXIT`` are the application's."""

SUBMIT_CAPACITY_REFUSALS: tuple[tuple[str, str], ...] = (
    ("job submit limit", "a submit limit of the job's QOS or association"),
    ("MaxSubmitJob", "a submit limit of the job's QOS or association"),
    ("Slurm temporarily unable to accept job", "slurmctld holds as many jobs as it takes"),
    ("MaxJobCount", "slurmctld holds as many jobs as it takes"),
)
"""Words of ``sbatch``'s refusals that are for capacity or quota, not for the job itself
(``Job violates accounting/QOS policy (job submit limit, ...)``: a QOS's or association's
``MaxSubmitJobs`` reached; a controller at its ``MaxJobCount``) -> what they mean. Another
backend may take such a job (failover); every other refusal is the job's own."""


def submit_refusal_limit(text: str) -> str | None:
    """What limit an ``sbatch`` refusal names, when it is a capacity refusal.

    Args:
        text: Slurm's error text.

    Returns:
        The limit (see :data:`SUBMIT_CAPACITY_REFUSALS`), or None for any other refusal.
    """
    low = text.lower()
    return next((why for words, why in SUBMIT_CAPACITY_REFUSALS if words.lower() in low), None)

_WHY_FAILED = {
    "TIMEOUT": "the job reached its time limit",
    "NODE_FAIL": "a node of the job failed",
    "PREEMPTED": "the job was preempted",
    "OUT_OF_MEMORY": "a task ran out of memory",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "the job reached its deadline",
}


def base_state(raw: Any) -> str:
    """The base state of a ``job_state`` value (a string, a list of flags, or ``X by UID``).

    Args:
        raw: What Slurm printed.

    Returns:
        The upper-case base state (``CANCELLED by 0`` -> ``CANCELLED``).
    """
    if isinstance(raw, list):
        raw = raw[0] if raw else ""
    return str(raw or "").split()[0].upper() if str(raw or "").strip() else ""


def to_app_state(raw: Any) -> AppState:
    """The app state of a Slurm job state (UNKNOWN for one tether does not know)."""
    return SLURM_STATE.get(base_state(raw), AppState.UNKNOWN)


@dataclass
class Component:
    """One job record (a plain job, or one component of a heterogeneous job).

    Attributes:
        job_id: Its own job id.
        offset: Its het-group index (0 for a plain job).
        state: Slurm's base state.
        reason: Slurm's reason (``None`` when there is none).
        exit_code: The batch script's exit code, when known.
        signal: The signal that ended it, when known.
        nodes: Its node list.
        restarts: Slurm's restart count.
        by: Who cancelled it (sacct's ``CANCELLED by UID``), when known.
    """

    job_id: str
    offset: int
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    restarts: int = 0
    by: str = ""


def _cancelled_by(raw: str) -> str:
    """``uid 1000 (alice)`` from ``CANCELLED by 1000``; empty when Slurm does not say."""
    _, sep, uid = raw.partition(" by ")
    if not sep or not uid.strip().isdigit():
        return ""
    import pwd

    try:
        return f"uid {uid.strip()} ({pwd.getpwuid(int(uid)).pw_name})"
    except KeyError:
        return f"uid {uid.strip()}"


@dataclass
class SlurmApp:
    """What tether knows of one Slurm job.

    Attributes:
        app_id: The (leader's) job id.
        name: The job name.
        state: The app state.
        msg: Slurm's state and reason.
        marker: tether's marker from the comment.
        components: The job's records, by het-group index.
        job_dir: The working directory (where the logs are).
        created: Submission time (seconds since the epoch).
        num_restarts: Restarts so far.
    """

    app_id: str
    name: str
    state: AppState
    msg: str
    marker: Marker
    components: list[Component] = field(default_factory=list)
    job_dir: str = ""
    created: float | None = None
    num_restarts: int = 0

    @property
    def log_stems(self) -> list[str]:
        """The roles' log-file stems, in het-group order."""
        return log_stems([n for n, _ in self.marker.roles])


def _int(v: Any) -> int | None:
    if isinstance(v, dict):  # newer Slurm: {"set": true, "number": N}
        return _int(v.get("number")) if v.get("set", True) else None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _exit(v: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) of squeue's ``exit_code`` (an int wait status, or a dict)."""
    if isinstance(v, dict):
        rc = _int(v.get("return_code"))
        sig = _int((v.get("signal") or {}).get("id")) if isinstance(v.get("signal"), dict) else None
        return rc, sig
    if isinstance(v, str) and ":" in v:  # sacct "rc:signal"
        rc_s, _, sig_s = v.partition(":")
        return _int(rc_s), _int(sig_s) or None
    status = _int(v)
    if status is None:
        return None, None
    return (status >> 8) & 0xFF, (status & 0x7F) or None


def component_from_squeue(job: Mapping[str, Any]) -> Component:
    """A component from one ``squeue --json`` job record.

    Args:
        job: The record.

    Returns:
        The component.
    """
    rc, sig = _exit(job.get("exit_code"))
    reason = str(job.get("state_reason") or "")
    return Component(
        job_id=str(job.get("job_id")),
        offset=_int(job.get("het_job_offset")) or 0,
        state=base_state(job.get("job_state")),
        reason="" if reason == "None" else reason,
        exit_code=rc,
        signal=sig,
        nodes=str(job.get("nodes") or ""),
        restarts=_int(job.get("restart_cnt")) or 0,
    )


def leader_id(job: Mapping[str, Any]) -> str:
    """The id tether knows a squeue record's job by (the het leader's id, or its own)."""
    het = _int(job.get("het_job_id"))
    return str(het) if het else str(job.get("job_id"))


def _aggregate(comps: Sequence[Component]) -> AppState:
    states = [SLURM_STATE.get(c.state, AppState.UNKNOWN) for c in comps]
    if not states or AppState.UNKNOWN in states:
        return AppState.UNKNOWN
    if all(s.is_terminal() for s in states):
        for s in (AppState.FAILED, AppState.CANCELLED):
            if s in states:
                return s
        return AppState.SUCCEEDED
    if AppState.RUNNING in states:
        return AppState.RUNNING
    return AppState.PENDING


def component_failure(c: Component) -> Failure | None:
    """Why a component failed (:data:`STATE_CAUSE`), with Slurm's state and reason.

    Args:
        c: The component.

    Returns:
        The failure; None unless its state is FAILED.
    """
    if SLURM_STATE.get(c.state) != AppState.FAILED:
        return None
    native = c.state + (f": {c.reason}" if c.reason else "")
    return Failure(STATE_CAUSE.get(c.state, FailureCause.UNKNOWN), native, c.exit_code)


def describe_component(c: Component) -> str:
    """A short text of a component's state: ``FAILED (NonZeroExitCode, exit code 3)``."""
    bits = []
    if c.by:
        bits.append(f"cancelled by {c.by}")
    if c.reason:
        bits.append(c.reason)
    if c.state in _WHY_FAILED:
        bits.append(_WHY_FAILED[c.state])
    if c.exit_code is not None and SLURM_STATE.get(c.state, AppState.UNKNOWN).is_terminal():
        if c.exit_code or c.state != "COMPLETED":
            bits.append(f"exit code {c.exit_code}")
        if c.signal:
            bits.append(f"signal {c.signal}")
    return f"{c.state} ({', '.join(bits)})" if bits else c.state


def analyze(
    app_id: str,
    name: str,
    marker: Marker,
    comps: Sequence[Component],
    job_dir: str = "",
    created: float | None = None,
) -> SlurmApp:
    """The app's view from its components.

    Args:
        app_id: The leader's job id.
        name: The job name.
        marker: tether's marker.
        comps: The components (any order).
        job_dir: The job's working directory.
        created: Submission time.

    Returns:
        The view.
    """
    comps = sorted(comps, key=lambda c: c.offset)
    state = _aggregate(comps)
    if len(comps) == 1:
        msg = describe_component(comps[0])
        if state == AppState.FAILED and marker.roles:  # name the role that failed
            msg = f"{marker.roles[0][0]}: {msg}"
    else:
        msg = "; ".join(
            f"{(marker.roles[c.offset][0] if c.offset < len(marker.roles) else c.offset)}: "
            f"{describe_component(c)}"
            for c in comps
        )
    if state == AppState.UNKNOWN:
        unknown = sorted({c.state for c in comps if c.state not in SLURM_STATE})
        msg = f"unknown Slurm state {', '.join(unknown) or '(none)'}; {msg}"
    return SlurmApp(
        app_id=app_id,
        name=name,
        state=state,
        msg=msg,
        marker=marker,
        components=list(comps),
        job_dir=job_dir,
        created=created,
        num_restarts=max([c.restarts for c in comps] + [0]),
    )


def from_squeue(jobs: Sequence[Mapping[str, Any]]) -> list[SlurmApp]:
    """tether's apps in a ``squeue --json`` listing (jobs without the marker are skipped).

    Args:
        jobs: The ``jobs`` array.

    Returns:
        One view per app, oldest first.
    """
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for job in jobs:
        grouped.setdefault(leader_id(job), []).append(job)
    apps: list[SlurmApp] = []
    for app_id, records in grouped.items():
        lead = min(records, key=lambda j: _int(j.get("het_job_offset")) or 0)
        marker = parse_comment(str(lead.get("comment") or ""))
        if marker is None:
            continue
        apps.append(
            analyze(
                app_id,
                str(lead.get("name") or ""),
                marker,
                [component_from_squeue(j) for j in records],
                job_dir=str(lead.get("current_working_directory") or ""),
                created=float(_int(lead.get("submit_time")) or 0) or None,
            )
        )
    return sorted(
        apps, key=lambda a: (a.created or 0.0, int(a.app_id) if a.app_id.isdigit() else 0)
    )


SACCT_FIELDS = (
    "JobID", "JobName", "State", "Reason", "ExitCode", "NodeList", "Comment", "WorkDir",
    "Submit",
)  # fmt: skip
"""Columns tether asks ``sacct --parsable2 --format`` for, in this order."""


def from_sacct(text: str) -> list[SlurmApp]:
    """tether's apps in ``sacct --parsable2 --noheader --format=<SACCT_FIELDS>`` output.

    Job steps (``123.batch``, ``123.0``) are skipped; components of a heterogeneous job show
    as ``123+0``, ``123+1``.

    Args:
        text: sacct's output.

    Returns:
        One view per app.
    """
    from datetime import datetime

    grouped: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, cols))
        jid = row["JobID"]
        if "." in jid:
            continue
        lead, _, off = jid.partition("+")
        row["_offset"] = off or "0"
        grouped.setdefault(lead, []).append(row)
    apps: list[SlurmApp] = []
    for app_id, rows in grouped.items():
        rows.sort(key=lambda r: int(r["_offset"]) if r["_offset"].isdigit() else 0)
        marker = parse_comment(rows[0]["Comment"])
        if marker is None:
            continue
        comps = []
        for r in rows:
            rc, sig = _exit(r["ExitCode"])
            reason = r["Reason"]
            comps.append(
                Component(
                    job_id=r["JobID"], offset=_int(r["_offset"]) or 0,
                    state=base_state(r["State"]), reason="" if reason == "None" else reason,
                    exit_code=rc, signal=sig, nodes=r["NodeList"], by=_cancelled_by(r["State"]),
                )
            )  # fmt: skip
        try:
            created: float | None = datetime.fromisoformat(rows[0]["Submit"]).timestamp()
        except ValueError:
            created = None
        apps.append(analyze(app_id, rows[0]["JobName"], marker, comps, rows[0]["WorkDir"], created))
    return apps


def role_statuses(app: SlurmApp) -> list[RoleStatus]:
    """Per-replica statuses: each replica has its role's component's state.

    Args:
        app: The view.

    Returns:
        One status per role.
    """
    by_offset = {c.offset: c for c in app.components}
    out = []
    for i, (role, n) in enumerate(app.marker.roles):
        comp = by_offset.get(i) or (app.components[0] if len(app.components) == 1 else None)
        state = SLURM_STATE.get(comp.state, AppState.UNKNOWN) if comp else AppState.UNKNOWN
        out.append(
            RoleStatus(
                role,
                [
                    ReplicaStatus(
                        id=k, state=state, role=role, hostname=comp.nodes if comp else "",
                        exit_code=comp.exit_code if comp and state.is_terminal() else None,
                        msg=describe_component(comp) if comp else "",
                        failure=component_failure(comp) if comp else None,
                    )
                    for k in range(n)
                ],
            )
        )  # fmt: skip
    return out


def roles(app: SlurmApp) -> list[Role]:
    """The roles as far as Slurm's records tell (name and replica count)."""
    return [Role(name=n, num_replicas=k) for n, k in app.marker.roles]
