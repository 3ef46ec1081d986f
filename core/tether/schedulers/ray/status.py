"""The one table from Ray job states to :class:`~tether.specs.AppState`."""

from __future__ import annotations

import re

from tether.schedulers.ray.driver import END_MARK, failed_replica, split_replica_line
from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause, application_failure

JOB_STATE: dict[str, AppState] = {
    "PENDING": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "STOPPED": AppState.CANCELLED,
}
"""Ray ``JobStatus`` value -> state (the Jobs API's message goes into ``msg``)."""


def app_state(ray_status: object) -> AppState:
    """Maps a Ray job status (enum or string) to an app state.

    Args:
        ray_status: ``JobStatus`` or its value.

    Returns:
        The state; UNKNOWN for a status tether does not know.
    """
    value = getattr(ray_status, "value", ray_status)
    return JOB_STATE.get(str(value), AppState.UNKNOWN)


MESSAGE_CAUSE: tuple[tuple[str, FailureCause], ...] = (
    (r"\bnode\b[^.]*\b(died|dead|removed|terminated)\b|NodeDiedError", FailureCause.NODE_LOST),
    (r"OutOfMemoryError|running low on memory|memory monitor", FailureCause.OOM_KILLED),
    (r"preempt", FailureCause.PREEMPTED),
)
"""Phrases of a failed Ray job's message -> cause, first match wins: the node running the
job's supervisor actor or a task died (a lost node), Ray's memory monitor killed a worker,
a node was preempted. Otherwise the entrypoint's exit code (``...failed with exit code N``)
makes it the application's."""


_END_MARK = re.compile(re.escape(END_MARK) + r"\[[^\]]*\]")


def _own_lines(message: str) -> str:
    """The message without the replicas' output: Ray's own words and tether's driver's.

    A failed job's message ends with the last lines of its log, where the replicas' output
    is too (``[role/k] ...``): an application that prints "node ... died" must not make its
    own failure a lost node. A replica's end mark is dropped, not its line: Ray's forwarding
    may put the driver's last line right after it.
    """
    return "\n".join(
        _END_MARK.sub("", line) for line in message.splitlines()
        if split_replica_line(line) is None
    )  # fmt: skip


def job_failure(ray_status: object, message: str) -> Failure | None:
    """Why a FAILED Ray job failed, with Ray's message (the replicas' output in it aside).

    Args:
        ray_status: ``JobStatus`` or its value.
        message: The Jobs API's message.

    Returns:
        The failure; None unless the job FAILED. The exit code of an application failure
        is the failed replica's (the driver's last line), else the entrypoint's.
    """
    if app_state(ray_status) != AppState.FAILED:
        return None
    line = message.strip().splitlines()[0] if message.strip() else ""
    own = _own_lines(message)
    for pattern, cause in MESSAGE_CAUSE:
        if re.search(pattern, own, re.IGNORECASE):
            return Failure(cause, line)
    replica = failed_replica(own)
    if replica is not None:
        return application_failure(replica[2], line)
    code = re.search(r"exit code (-?\d+)", own)
    return application_failure(int(code.group(1)) if code else None, line)
