"""The one table from AWS Batch job statuses to :class:`~tether.specs.AppState`, and the
message with the native reason."""

from __future__ import annotations

from typing import Any

from tether.specs import AppState

CANCEL_REASON = "cancelled by tether"
"""The ``reason`` tether gives ``terminate_job``; a FAILED job with it is CANCELLED."""

JOB_STATUS: dict[str, AppState] = {
    "SUBMITTED": AppState.SUBMITTED,
    "PENDING": AppState.PENDING,
    "RUNNABLE": AppState.PENDING,
    "STARTING": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
}
"""Batch ``status`` -> state (FAILED with :data:`CANCEL_REASON` is CANCELLED)."""


def app_state(job: dict[str, Any]) -> AppState:
    """The state of a job as ``describe_jobs`` returns it.

    Args:
        job: The job.

    Returns:
        The state; UNKNOWN for a status tether does not know.
    """
    state = JOB_STATUS.get(str(job.get("status", "")), AppState.UNKNOWN)
    if state == AppState.FAILED and str(job.get("statusReason", "")).startswith(CANCEL_REASON):
        return AppState.CANCELLED
    return state


def exit_code(job: dict[str, Any]) -> int | None:
    """The container exit code of the job's last attempt (or of the job), if any.

    Args:
        job: The job.

    Returns:
        The exit code.
    """
    for source in [*(a.get("container", {}) for a in reversed(job.get("attempts") or [])),
                   job.get("container") or {}]:  # fmt: skip
        code = source.get("exitCode")
        if code is not None:
            return int(code)
    return None


def status_message(job: dict[str, Any]) -> str:
    """``statusReason``, the exit code and the container's reason, as one line.

    Args:
        job: The job.

    Returns:
        The message, or "".
    """
    parts: list[str] = []
    if job.get("statusReason"):
        parts.append(str(job["statusReason"]))
    code = exit_code(job)
    if code is not None and job.get("status") in ("FAILED", "SUCCEEDED"):
        parts.append(f"exit code {code}")
    attempts = job.get("attempts") or []
    reason = (attempts[-1].get("container", {}) if attempts else {}).get("reason") or (
        job.get("container") or {}).get("reason")
    if reason:
        parts.append(str(reason))
    if len(attempts) > 1:
        parts.append(f"attempt {len(attempts)}")
    return "; ".join(parts)
