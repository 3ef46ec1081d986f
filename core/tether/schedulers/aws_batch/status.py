"""The one table from AWS Batch job statuses to :class:`~tether.specs.AppState`, and the
message with the native reason."""

from __future__ import annotations

import re
from typing import Any

from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause, application_failure

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
        job.get("container") or {}
    ).get("reason")
    if reason:
        parts.append(str(reason))
    if len(attempts) > 1:
        parts.append(f"attempt {len(attempts)}")
    return "; ".join(parts)


FAILURE_PATTERNS: tuple[tuple[str, FailureCause], ...] = (
    (r"^Host EC2 \(instance [^)]*\) terminated", FailureCause.HOST_TERMINATED),
    (r"^Host EC2 ", FailureCause.HOST_TERMINATED),
    (r"[Ss]pot [Ii]nstance.*(interrupt|reclaim|terminat)", FailureCause.PREEMPTED),
    (r"^OutOfMemoryError", FailureCause.OOM_KILLED),
    (r"^(CannotCreateContainerError|ResourceInitializationError)", FailureCause.OUT_OF_CAPACITY),
)
"""Documented AWS Batch reasons (the job's ``statusReason``, then the last attempt's
``statusReason`` and container ``reason``) -> cause, first match wins. A reclaimed spot
instance, like any EC2 instance terminated under a job, is reported as ``Host EC2 (instance
i-...) terminated.`` (the reason AWS documents for ``evaluateOnExit`` ``onStatusReason:
"Host EC2*"`` retries); ``OutOfMemoryError: Container killed due to memory usage`` is the
container's memory limit. Anything else with an exit code is the application's."""


def _reasons(job: dict[str, Any]) -> list[str]:
    attempts = job.get("attempts") or []
    last = attempts[-1] if attempts else {}
    return [
        str(x)
        for x in (
            job.get("statusReason"),
            last.get("statusReason"),
            (last.get("container") or {}).get("reason"),
            (job.get("container") or {}).get("reason"),
        )
        if x
    ]


def job_failure(job: dict[str, Any]) -> Failure | None:
    """Why a FAILED job failed (:data:`FAILURE_PATTERNS`), with Batch's reason.

    Args:
        job: The job as ``describe_jobs`` returns it.

    Returns:
        The failure; None unless the job is FAILED (a cancel is not a failure).
    """
    if app_state(job) != AppState.FAILED:
        return None
    reasons = _reasons(job)
    for pattern, cause in FAILURE_PATTERNS:
        for reason in reasons:
            if re.search(pattern, reason):
                return Failure(cause, reason, exit_code(job))
    return application_failure(exit_code(job), "; ".join(reasons))
