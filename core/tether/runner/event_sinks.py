"""Where TorchX runner events go: the destination and the handler plugins that serve one.

Shared by :mod:`tether.runner.event_log` (which builds a destination's handler) and
:mod:`tether.runner.recording` (which skips an event no handler would see).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

DESTINATION_ENV = "TETHER_EVENTS_DESTINATION"
ENTRY_POINT_GROUP = "tether.event_handlers"


def destination() -> str:
    """Where events go: ``$TETHER_EVENTS_DESTINATION``, else ``null``."""
    return os.environ.get(DESTINATION_ENV) or "null"


def plugin_handlers() -> dict[str, Callable[[], Any]]:
    """The event-handler plugins by destination (namespace packages and entry points).

    Returns:
        Destination to handler factory (``() -> logging.Handler``).
    """
    from tether.specs.plugins import PluginType, entry_points_enabled, registry

    found: dict[str, Callable[[], Any]] = dict(
        registry().namespace_plugins(PluginType.EVENT_HANDLER))
    if entry_points_enabled():
        from tether.util.entry_points import entry_points  # cached: no metadata scan

        for ep in entry_points(ENTRY_POINT_GROUP):
            found[ep.name] = functools.partial(_load_and_call, ep)
    return found


def _load_and_call(ep: Any) -> Any:
    return ep.load()()
