"""The one table from Batch job states to :class:`~tether.specs.AppState`."""

from __future__ import annotations

from typing import Any

from tether.specs import AppState

JOB_STATE: dict[str, AppState] = {
    "STATE_UNSPECIFIED": AppState.UNKNOWN,
    "QUEUED": AppState.PENDING,
    "SCHEDULED": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "CANCELLATION_IN_PROGRESS": AppState.RUNNING,
    "CANCELLED": AppState.CANCELLED,
    "DELETION_IN_PROGRESS": AppState.CANCELLED,
}
"""``JobStatus.State`` name -> state (the last status event's description goes into ``msg``)."""


def app_state(job: dict[str, Any]) -> AppState:
    """The state of a job (as a dict with proto field names and enum names).

    Args:
        job: The job.

    Returns:
        The state; UNKNOWN for a state tether does not know.
    """
    return JOB_STATE.get(str(job.get("status", {}).get("state", "")), AppState.UNKNOWN)


def status_message(job: dict[str, Any]) -> str:
    """The description of the job's latest status event.

    Args:
        job: The job.

    Returns:
        The message, or "".
    """
    events = job.get("status", {}).get("status_events", []) or []
    if not events:
        return ""
    latest = max(events, key=lambda e: str(e.get("event_time", "")))
    return str(latest.get("description", ""))
