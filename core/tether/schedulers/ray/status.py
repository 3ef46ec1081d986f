"""The one table from Ray job states to :class:`~tether.specs.AppState`."""

from __future__ import annotations

from tether.specs import AppState

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
