"""Scheduler registry: built-in backends (lazily imported) plus plugins.

Importing this package imports no backend module. Built-ins are import strings; a backend is
imported only when its factory is called. Plugins register a factory
``(session_name: str, **kwargs) -> Scheduler`` in the entry-point group ``tether.schedulers``;
a plugin that reuses a built-in name is an error naming both, never a silent replacement.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import TetherError
from tether.specs.unknown_scheduler import UnknownSchedulerException

if TYPE_CHECKING:
    from tether.schedulers.api import Scheduler

ENTRY_POINT_GROUP = "tether.schedulers"

BUILTIN_SCHEDULERS: dict[str, str] = {
    "local_cwd": "tether.schedulers.local.scheduler:create_scheduler",
    "kubernetes": "tether.schedulers.kubernetes.scheduler:create_scheduler",
    "slurm": "tether.schedulers.slurm.scheduler:create_scheduler",
    "ray": "tether.schedulers.ray.scheduler:create_scheduler",
    "lsf": "tether.schedulers.lsf.scheduler:create_scheduler",
    "gcp_batch": "tether.schedulers.gcp_batch.scheduler:create_scheduler",
    "local_docker": "tether.schedulers.local_docker.scheduler:create_scheduler",
    "aws_batch": "tether.schedulers.aws_batch.scheduler:create_scheduler",
    "aws_sagemaker": "tether.schedulers.aws_sagemaker.scheduler:create_scheduler",
}
"""Built-in backends: name -> ``module:factory``. The first one is the default."""


def entry_points(group: str) -> Any:
    """The installed entry points of ``group``, from tether's entry-point cache (scanning the
    installed metadata costs tens of milliseconds, and the local supervisor imports this
    package)."""
    from tether.util.entry_points import entry_points as _entry_points

    return _entry_points(group)


class SchedulerFactory(Protocol):
    """Creates a scheduler for a session."""

    def __call__(self, session_name: str, **kwargs: Any) -> Scheduler[Any]: ...


class SchedulerRegistryError(TetherError, RuntimeError):
    """A plugin clashes with a built-in scheduler or cannot be loaded."""


class UnknownSchedulerError(UnknownSchedulerException):
    """No scheduler has that name; the message lists the available ones and close matches.

    A :class:`tether.errors.NotFoundError` and a ``KeyError``, and TorchX's
    ``specs.UnknownSchedulerException``.
    """


def _lazy(target: str) -> SchedulerFactory:
    module, _, attr = target.partition(":")

    def factory(session_name: str, **kwargs: Any) -> Scheduler[Any]:
        fn: Callable[..., Scheduler[Any]] = getattr(importlib.import_module(module), attr)
        return fn(session_name, **kwargs)

    factory.__qualname__ = factory.__name__ = f"lazy({target})"
    return factory


def get_scheduler_factories() -> dict[str, SchedulerFactory]:
    """Every available scheduler by name; the first is the default.

    Returns:
        Name to factory.

    Raises:
        SchedulerRegistryError: When a plugin reuses a built-in name.
    """
    factories: dict[str, SchedulerFactory] = {n: _lazy(t) for n, t in BUILTIN_SCHEDULERS.items()}
    from tether.specs.plugins import PluginType, entry_points_enabled, registry

    for ep in entry_points(group=ENTRY_POINT_GROUP) if entry_points_enabled() else ():
        if ep.name in BUILTIN_SCHEDULERS:
            raise SchedulerRegistryError(
                f"scheduler plugin {ep.name!r} ({ep.value}, from the {ENTRY_POINT_GROUP!r} "
                f"entry points) clashes with the built-in {ep.name!r} "
                f"({BUILTIN_SCHEDULERS[ep.name]}); register it under another name"
            )
        factories[ep.name] = _lazy(ep.value)
    for name, fn in registry().namespace_plugins(PluginType.SCHEDULER).items():
        if name in BUILTIN_SCHEDULERS:
            raise SchedulerRegistryError(
                f"scheduler plugin {name!r} ({fn.__module__}) clashes with the built-in "
                f"{name!r} ({BUILTIN_SCHEDULERS[name]}); register it under another name"
            )
        factories.setdefault(name, fn)
    return factories


def get_default_scheduler_name() -> str:
    """The default scheduler: ``local_cwd``."""
    return next(iter(BUILTIN_SCHEDULERS))


def get_scheduler_factory(name: str) -> SchedulerFactory:
    """The factory of one scheduler.

    Args:
        name: The scheduler's name.

    Returns:
        Its factory.

    Raises:
        UnknownSchedulerError: For an unknown name (a ``KeyError``), listing the available
            ones and close matches.
    """
    factories = get_scheduler_factories()
    if name not in factories:
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(name, list(factories), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownSchedulerError(
            f"unknown scheduler {name!r}.{hint} Available: {', '.join(factories)}"
        )
    return factories[name]
