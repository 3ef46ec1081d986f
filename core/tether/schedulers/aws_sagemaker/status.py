"""The one table from SageMaker training job statuses to :class:`~tether.specs.AppState`."""

from __future__ import annotations

import re
from typing import Any

from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause

JOB_STATUS: dict[str, AppState] = {
    "InProgress": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Stopping": AppState.RUNNING,
    "Stopped": AppState.CANCELLED,
}
"""``TrainingJobStatus`` -> state (InProgress before the instances run is PENDING)."""

PENDING_SECONDARY = frozenset(
    {
        "Starting",
        "Pending",
        "LaunchingMLInstances",
        "PreparingTrainingStack",
        "Downloading",
        "DownloadingTrainingImage",
    }
)
"""``SecondaryStatus`` values of an InProgress job whose program does not run yet."""


def app_state(job: dict[str, Any]) -> AppState:
    """The state of a job as ``describe_training_job`` returns it.

    Args:
        job: The description.

    Returns:
        The state; UNKNOWN for a status tether does not know.
    """
    state = JOB_STATUS.get(str(job.get("TrainingJobStatus", "")), AppState.UNKNOWN)
    if (
        state == AppState.RUNNING
        and job.get("TrainingJobStatus") == "InProgress"
        and (job.get("SecondaryStatus") in PENDING_SECONDARY)
    ):
        return AppState.PENDING
    return state


def status_message(job: dict[str, Any]) -> str:
    """``FailureReason`` and the latest secondary status message.

    Args:
        job: The description.

    Returns:
        The message, or "".
    """
    parts: list[str] = []
    if job.get("FailureReason"):
        parts.append(str(job["FailureReason"]))
    transitions = job.get("SecondaryStatusTransitions") or []
    if transitions:
        last = transitions[-1]
        parts.append(f"{last.get('Status', '')}: {last.get('StatusMessage', '')}".strip(": "))
    elif job.get("SecondaryStatus"):
        parts.append(str(job["SecondaryStatus"]))
    return "; ".join(parts)


SECONDARY_CAUSE: dict[str, FailureCause] = {
    "Interrupted": FailureCause.PREEMPTED,
    "MaxWaitTimeExceeded": FailureCause.OUT_OF_CAPACITY,
}
"""``SecondaryStatus`` of a failed or stopped job -> cause: ``Interrupted`` is the documented
status of a managed spot training job whose spot instances were reclaimed;
``MaxWaitTimeExceeded`` means no spot capacity came within ``MaxWaitTimeInSeconds``."""

FAILURE_REASON_CAUSE: tuple[tuple[str, FailureCause], ...] = (
    (r"[Ss]pot", FailureCause.PREEMPTED),
    (
        r"^CapacityError|InsufficientInstanceCapacity|ResourceLimitExceeded",
        FailureCause.OUT_OF_CAPACITY,
    ),
    (r"out of memory|OutOfMemory|MemoryError", FailureCause.OOM_KILLED),
    (r"^(AlgorithmError|ClientError)", FailureCause.APPLICATION),
)
"""``FailureReason`` prefix or phrase -> cause, first match wins; other reasons
(``InternalServerError``...) are UNKNOWN."""


def job_failure(job: dict[str, Any]) -> Failure | None:
    """Why a failed training job failed, with SageMaker's reason.

    Args:
        job: The description.

    Returns:
        The failure; None unless ``TrainingJobStatus`` is ``Failed``.
    """
    if job.get("TrainingJobStatus") != "Failed":
        return None
    reason = str(job.get("FailureReason") or "")
    secondary = str(job.get("SecondaryStatus") or "")
    if secondary in SECONDARY_CAUSE:
        return Failure(SECONDARY_CAUSE[secondary], "; ".join(x for x in (secondary, reason) if x))
    for pattern, cause in FAILURE_REASON_CAUSE:
        if re.search(pattern, reason):
            code = re.search(r"[Ee]xit [Cc]ode:? (\d+)", reason)
            return Failure(cause, reason, int(code.group(1)) if code else None)
    return Failure(FailureCause.UNKNOWN, reason or secondary)
