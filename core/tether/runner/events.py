"""What a follower of launched apps hears: :class:`AppEvent`; and TorchX's runner events
(:class:`TetherEvent`, :func:`record`, :class:`log_event`; see :mod:`tether.runner.event_log`).

Kept apart from :mod:`tether.runner.follow`, which loads the watch hub: the Runner and its
users name the event type without paying for the hub until they follow an app.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.runner.event_log import (
    SourceType,
    TetherEvent,
    get_logging_handler,
    log_event,
    record,
)
from tether.specs import AppHandle, AppState, AppStatus

__all__ = [
    "AppEvent",
    "SourceType",
    "TetherEvent",
    "get_logging_handler",
    "log_event",
    "record",
]


@dataclass(frozen=True)
class AppEvent:
    """A change of a followed app.

    Attributes:
        app_handle: The app.
        state: Its state (UNKNOWN when it is gone).
        status: Its status (None when the scheduler confirmed it no longer exists).
        msg: The scheduler's message, or why the app is gone.
        final: Nothing more will be heard of it (a terminal state, or gone).
        previous: The state heard before (None for the first event).
    """

    app_handle: AppHandle
    state: AppState
    status: AppStatus | None
    msg: str
    final: bool
    previous: AppState | None = None
