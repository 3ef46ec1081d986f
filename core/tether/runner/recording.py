"""Which Runner calls record a TorchX runner event, and whether anything listens.

``Runner.dryrun``, ``schedule``, ``status``, ``describe``, ``list``, ``log_lines`` and
``cancel`` record one (:func:`recorded` wraps the method that does the work: ``dryrun`` and
``schedule`` of :class:`~tether.runner.launch.Launcher`, ``status`` of
:class:`~tether.runner.following.Following`, the others the Runner's own). The event itself
(:class:`TetherEvent` and its handlers, :mod:`tether.runner.event_log`) is built only when a
handler would see it: the default destination, ``null``, drops every event unless a plugin of
that name is installed, so a call under it skips the event and
:mod:`tether.runner.event_log` is not imported (a dry run does not pay for it).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from tether.runner.event_sinks import destination, plugin_handlers

F = TypeVar("F", bound=Callable[..., Any])


def listening() -> bool:
    """Whether an event recorded now could reach a handler.

    False only for the ``null`` destination with no plugin of that name, while no event
    was recorded in this process (:mod:`tether.runner.event_log` keeps the handler it made
    per destination): ``null``'s own handler drops every event.
    """
    if destination() != "null" or "tether.runner.event_log" in sys.modules:
        return True
    return "null" in plugin_handlers()


def recorded(api: str, fields: Callable[..., dict[str, Any]],
             after: Callable[[Any], dict[str, Any]] | None = None) -> Callable[[F], F]:
    """Makes a Runner method record an event per call (see :class:`event_log.log_event
    <tether.runner.event_log.log_event>`), when anything listens (:func:`listening`).

    Args:
        api: The event's api name.
        fields: ``(self, *args, **kwargs) -> {"scheduler": ..., "app_id": ...}`` (the
            ``log_event`` arguments) from the call's arguments.
        after: Event fields from the call's result (``schedule``'s handle gives the app id).

    Returns:
        The decorator.
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not listening():
                return fn(*args, **kwargs)
            from tether.runner.event_log import log_event

            try:
                extra = fields(*args, **kwargs)
            except Exception:  # odd arguments: the method itself will say what is wrong
                extra = {}
            with log_event(api, **extra) as ctx:
                result = fn(*args, **kwargs)
                if after is not None:
                    for key, value in after(result).items():
                        setattr(ctx.event, key, value)
                return result

        return call  # type: ignore[return-value]

    return wrap


def app_fields(app: Any, scheduler: str | None, cfg: Any = None, workspace: Any = None
               ) -> dict[str, Any]:
    """The event fields of an app about to be rendered or submitted.

    Args:
        app: The AppDef (or None).
        scheduler: The scheduler's name.
        cfg: The run options given.
        workspace: The workspace given.

    Returns:
        ``log_event`` arguments.
    """
    roles = getattr(app, "roles", None) or []
    return {
        "scheduler": scheduler,
        "app_image": roles[0].image if roles else None,
        "app_metadata": {str(k): str(v) for k, v in (getattr(app, "metadata", None) or {}
                                                     ).items()},
        "runcfg": json.dumps(dict(cfg), default=str) if cfg else None,
        "workspace": str(workspace) if workspace else None,
    }


def handle_fields(app_handle: Any) -> dict[str, Any]:
    """The scheduler and app id of an app handle (nothing for a malformed one).

    Args:
        app_handle: The handle.

    Returns:
        ``scheduler`` and ``app_id``.
    """
    from tether.specs import parse_app_handle

    try:
        parsed = parse_app_handle(app_handle)
    except Exception:
        return {}
    return {"scheduler": parsed.scheduler_backend, "app_id": parsed.app_id}
