"""Which job a try of an Airflow task instance runs: the re-attach rules, in one place.

A task instance (DAG run + task + map index) gets several *tries*: retries after a failure,
a new try after its worker died, and a new try each time a user clears it. Each try either
**re-attaches** to the job an earlier try launched or **launches** a new one, by the one rule
every adapter shares (:mod:`tether.runner.reattach`), applied here to what the ledger below
records. With ``reattach="auto"``, the default:

* a job an earlier try launched that is **not final** (running, or in a state the scheduler
  cannot tell) is re-attached (a retry after a worker crash, a clear while the job runs);
* a job that **SUCCEEDED but whose outcome was never recorded** (the worker died after the job
  ended and before the task finished) is adopted: the try returns its outputs;
* anything else launches a **new** job: the earlier job FAILED or was CANCELLED (a retry), its
  outcome was recorded (a user cleared a finished task to run it again), or the scheduler no
  longer knows it.

``reattach="always"`` also re-uses a SUCCEEDED job whose outcome was recorded (a clear
returns the earlier result); ``reattach="never"`` launches a new job on every try and cancels
a job an earlier try left running. Without a ledger (no ``task_state_store``) every finished
job counts as recorded.

The record that makes this possible is the **ledger**: one JSON value in the task
instance's ``task_state_store`` (Airflow 3.3+), which survives retries and clears and belongs
to one DAG run. It names the job (its handle, and its job key before the handle is known),
the try that launched it, the try that owns it now and whether its outcome was recorded.
It is written before the job is submitted, so a worker that dies between submission and the
write of the handle leaves a key the next try finds the job by. Each job carries the try that
launched it in its job key (``...try_number``) and in ``TETHER_AIRFLOW_TRY_NUMBER``.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tether.errors import SpecError
from tether.runner.reattach import Decision, EarlierJob, Reattach
from tether.runner.reattach import decide as decide_reattach
from tether.specs import AppStatus

LEDGER_KEY = "tether.job"
"""The ``task_state_store`` key of the ledger."""

ENV_TRY_NUMBER = "TETHER_AIRFLOW_TRY_NUMBER"
"""The environment variable holding the try that launched the job."""

REATTACH_MODES = ("auto", "always", "never")


class AirflowAdapterError(SpecError):
    """Bad input to the Airflow adapter (an argument, an option): names field and value."""


ON_FINISH_ACTIONS = ("keep", "delete_succeeded", "delete")


def check_choice(field_name: str, value: object, allowed: tuple[str, ...], task_id: str) -> str:
    """Validates an operator argument that takes one of a few names.

    Args:
        field_name: The argument.
        value: Its value.
        allowed: The names it takes.
        task_id: The task (for the message).

    Returns:
        The value.

    Raises:
        AirflowAdapterError: For any other value (the message lists the allowed ones and the
            closest match).
    """
    if isinstance(value, str) and value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise AirflowAdapterError(
        f"task {task_id!r}: {field_name}={value!r} is not allowed; use one of "
        f"{', '.join(repr(m) for m in allowed)}{hint}"
    )


def check_ttl(value: object, task_id: str) -> int | None:
    """Validates ``job_ttl``: None, or a non-negative number of seconds or timedelta.

    Args:
        value: The argument.
        task_id: The task (for the message).

    Returns:
        Whole seconds, or None.

    Raises:
        AirflowAdapterError: For anything else.
    """
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise AirflowAdapterError(
            f"task {task_id!r}: job_ttl={value!r} is not allowed; use a number of seconds "
            ">= 0 or a datetime.timedelta (or None to keep finished jobs)"
        )
    return int(seconds)


def check_reattach(value: object, task_id: str) -> str:
    """Validates the operator's ``reattach`` argument (see :func:`check_choice`).

    Args:
        value: The argument.
        task_id: The task (for the message).

    Returns:
        The mode.
    """
    return check_choice("reattach", value, REATTACH_MODES, task_id)


@dataclass
class Ledger:
    """What the task instance's tries know about its current job.

    Attributes:
        job_key: The job key the job was submitted with.
        launched_by: The try that launched it.
        owner: The try that follows it now (the only one whose kill may cancel it).
        app_handle: Its handle (None while the submission is in flight).
        recorded: Whether a try recorded the job's outcome (the task finished with it).
        state: The outcome that was recorded (an AppState name).
        scheduler: The scheduler the job runs on.
        extra: Room for more (ignored by this version).
    """

    job_key: str
    launched_by: int
    owner: int
    scheduler: str = ""
    app_handle: str | None = None
    recorded: bool = False
    state: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON value stored in ``task_state_store``."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: object) -> Ledger | None:
        """Reads a stored value (None when absent or not a ledger).

        Args:
            value: What ``task_state_store.get`` returned.

        Returns:
            The ledger, or None.
        """
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(
                job_key=str(value["job_key"]),
                launched_by=int(value["launched_by"]),
                owner=int(value.get("owner", value["launched_by"])),
                scheduler=str(value.get("scheduler") or ""),
                app_handle=str(value["app_handle"]) if value.get("app_handle") else None,
                recorded=bool(value.get("recorded", False)),
                state=str(value["state"]) if value.get("state") else None,
                extra=dict(value.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError):
            return None


def decide(
    ledger: Ledger | None, status: AppStatus | None, mode: str, try_number: int
) -> Decision:
    """Applies the re-attach rule to the earlier job of the task instance (see module docs).

    Args:
        ledger: The ledger (None: no earlier try launched a job).
        status: The earlier job's status (None: no job found, or the scheduler forgot it).
        mode: ``auto``, ``always`` or ``never``.
        try_number: The current try.

    Returns:
        The decision.
    """
    return decide_reattach(earlier_job(ledger, status), Reattach.parse(mode))


def earlier_job(ledger: Ledger | None, status: AppStatus | None) -> EarlierJob | None:
    """The earlier job as the shared rule sees it: the ledger's job and whether a try
    recorded its outcome.

    Args:
        ledger: The ledger (None: no earlier try launched a job).
        status: The job's status.

    Returns:
        The earlier job, or None.
    """
    if ledger is None:
        return None
    return EarlierJob(ledger.app_handle, status, recorded=ledger.recorded,
                      who=f"the job launched by try {ledger.launched_by}",
                      recorded_by=f"try {ledger.owner}")


STOP_STATES = frozenset({"failed", "success", "skipped", "upstream_failed", "removed"})
"""Task instance states that mean a user stopped the task for good (mark failed/success...)."""


def kill_cancels_job(
    ti_state: str | None, owner: int | None, try_number: int, deferred: bool = False
) -> tuple[bool, str]:
    """Whether a killed try cancels its job, and why.

    A try cancels only a job it owns (a newer try may have re-attached to it already), and
    not when the task instance was cleared (its next try re-attaches to the running job).

    Args:
        ti_state: The task instance's state when the kill arrived (None: no state, as after a
            clear; ``"unknown"``: it could not be read).
        owner: The ledger's owner try (None when unknown).
        try_number: The killed try.
        deferred: The kill reached the trigger of a deferred try. A deferred task is killed
            only by a user (mark failed or success, clear), so every state but a final one
            means a new try follows and re-attaches. A running worker is also stopped when it
            shuts down (the task instance is then still ``running``): that cancels.

    Returns:
        ``(cancel, reason)``.
    """
    if owner is not None and owner != try_number:
        return False, f"try {owner} owns the job now"
    if ti_state == "unknown":
        return True, "the task instance's state cannot be read"
    if ti_state in STOP_STATES:
        return True, f"the task instance is {ti_state}"
    if deferred or ti_state in ("restarting", "scheduled", "queued", "up_for_retry", None):
        return False, (
            f"the task instance was cleared ({ti_state or 'no state'}): its next try "
            "re-attaches to the job"
        )
    return True, f"the task instance is {ti_state}"


def ti_state(dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    """The task instance's current state as Airflow records it (``"unknown"`` on errors).

    Works where Airflow's supervisor channel is (a task, a trigger).

    Args:
        dag_id: The DAG.
        run_id: The DAG run.
        task_id: The task.
        map_index: The map index (-1 when unmapped).

    Returns:
        The state's name, None for no state, or ``"unknown"``.
    """
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = RuntimeTaskInstance.get_task_states(
            dag_id=dag_id, task_ids=[task_id], run_ids=[run_id]
        )
    except Exception:
        return "unknown"
    name = task_id if map_index < 0 else f"{task_id}_{map_index}"
    found = states.get(run_id, {})
    if name not in found:
        return "unknown"
    value = found[name]
    return None if value is None else str(getattr(value, "value", value))
