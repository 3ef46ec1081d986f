"""Tracker registry: built-in backends (imported lazily) plus plugins.

Importing this module imports no backend. Built-ins are import strings; a backend's module is
imported when its factory is called. Plugins register a factory
``(config: str | None) -> TrackerBase`` in the entry-point group ``tether.tracker``::

    [project.entry-points."tether.tracker"]
    my_tracker = "my_pkg.tracking:create"

tether declares its own built-ins in that group too; an entry point that reuses a built-in name
with another target is an error naming both, never a silent replacement.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tether.errors import NotFoundError, TetherError
from tether.util.entry_points import entry_points

if TYPE_CHECKING:
    from tether.tracker.api import TrackerBase

ENTRY_POINT_GROUP = "tether.tracker"

BUILTIN_TRACKERS: dict[str, str] = {
    "fsspec": "tether.tracker.backend.fsspec:create",
    "mlflow": "tether.tracker.backend.mlflow:create",
}
"""Built-in backends: name -> ``module:factory``."""

TrackerFactory = Callable[[str | None], "TrackerBase"]


class TrackerRegistryError(TetherError, RuntimeError):
    """A plugin clashes with a built-in tracker, or its factory cannot be loaded."""


class UnknownTrackerError(NotFoundError):
    """A tracker name is not registered; the message lists the available ones."""


def _lazy(name: str, target: str) -> TrackerFactory:
    module, _, attr = target.partition(":")

    def factory(config: str | None) -> TrackerBase:
        try:
            fn: TrackerFactory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise TrackerRegistryError(
                f"tracker {name!r}: cannot load its factory {target!r} ({e}); install the "
                "package that provides it"
            ) from e
        return fn(config)

    factory.__qualname__ = factory.__name__ = f"lazy({target})"
    return factory


def get_tracker_factories() -> dict[str, TrackerFactory]:
    """Every available tracker backend by name (built-ins first).

    Returns:
        Name to factory.

    Raises:
        TrackerRegistryError: When a plugin reuses a built-in name with another target.
    """
    factories: dict[str, TrackerFactory] = {n: _lazy(n, t) for n, t in BUILTIN_TRACKERS.items()}
    from tether.specs.plugins import PluginType, entry_points_enabled, registry

    for ep in entry_points(group=ENTRY_POINT_GROUP) if entry_points_enabled() else ():
        builtin = BUILTIN_TRACKERS.get(ep.name)
        if builtin is not None:
            if ep.value.replace(" ", "") != builtin:
                raise TrackerRegistryError(
                    f"tracker plugin {ep.name!r} ({ep.value}, from the {ENTRY_POINT_GROUP!r} "
                    f"entry points) clashes with the built-in {ep.name!r} ({builtin}); "
                    "register it under another name"
                )
            continue
        factories[ep.name] = _lazy(ep.name, ep.value)
    for name, fn in registry().namespace_plugins(PluginType.TRACKER).items():
        if name in BUILTIN_TRACKERS:
            raise TrackerRegistryError(
                f"tracker plugin {name!r} ({fn.__module__}) clashes with the built-in "
                f"{name!r} ({BUILTIN_TRACKERS[name]}); register it under another name"
            )
        factories.setdefault(name, fn)
    return factories


def get_tracker_factory(name: str) -> TrackerFactory:
    """The factory of one tracker backend.

    Args:
        name: The tracker's name, or (as TorchX) a factory as ``package.module:function``.

    Returns:
        Its factory.

    Raises:
        UnknownTrackerError: For an unknown name, listing the available ones and close matches.
    """
    factories = get_tracker_factories()
    if name not in factories and ":" in name:  # TorchX's form: a factory named module:function
        return _lazy(name, name.replace(" ", ""))
    if name not in factories:
        close = difflib.get_close_matches(name, list(factories), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownTrackerError(
            f"unknown tracker {name!r}.{hint} Available: {', '.join(factories)} (plugins "
            f"register in the {ENTRY_POINT_GROUP!r} entry-point group)"
        )
    return factories[name]


def build_trackers(trackers: Mapping[str, str | None]) -> dict[str, TrackerBase]:
    """Creates the named backends with their configs.

    Args:
        trackers: Tracker name to its config string (None for the backend's default).

    Returns:
        Name to backend, in the given order.

    Raises:
        UnknownTrackerError: For an unknown name.
    """
    return {name: get_tracker_factory(name)(config) for name, config in trackers.items()}
