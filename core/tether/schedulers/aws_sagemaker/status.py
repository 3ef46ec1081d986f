"""The one table from SageMaker training job statuses to :class:`~tether.specs.AppState`."""

from __future__ import annotations

from typing import Any

from tether.specs import AppState

JOB_STATUS: dict[str, AppState] = {
    "InProgress": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Stopping": AppState.RUNNING,
    "Stopped": AppState.CANCELLED,
}
"""``TrainingJobStatus`` -> state (InProgress before the instances run is PENDING)."""

PENDING_SECONDARY = frozenset({"Starting", "Pending", "LaunchingMLInstances",
                               "PreparingTrainingStack", "Downloading", "DownloadingTrainingImage"})
"""``SecondaryStatus`` values of an InProgress job whose program does not run yet."""


def app_state(job: dict[str, Any]) -> AppState:
    """The state of a job as ``describe_training_job`` returns it.

    Args:
        job: The description.

    Returns:
        The state; UNKNOWN for a status tether does not know.
    """
    state = JOB_STATUS.get(str(job.get("TrainingJobStatus", "")), AppState.UNKNOWN)
    if state == AppState.RUNNING and job.get("TrainingJobStatus") == "InProgress" and (
            job.get("SecondaryStatus") in PENDING_SECONDARY):
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
