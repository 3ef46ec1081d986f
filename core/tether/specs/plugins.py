"""Plugins found in ``tether_plugins.*`` namespace packages (TorchX's ``torchx.plugins``).

A package contributes plugins by shipping modules under ``tether_plugins/schedulers/``,
``tether_plugins/named_resources/`` or ``tether_plugins/tracker/`` (PEP 420 namespace
packages: no ``__init__.py`` needed, so any number of distributions share them) whose
functions are decorated with :class:`register`::

    # tether_plugins/schedulers/my_cluster.py
    from tether.plugins import register

    @register.scheduler()
    def my_cluster(session_name: str, **kwargs) -> Scheduler: ...

:func:`registry` finds them (each group on first use): the scheduler, named-resource and
tracker lookups of tether include them, after the built-ins and the entry-point plugins
(which keep working). A module that fails to import, a plugin under the wrong group's
namespace and a second plugin of the same name are skipped and recorded in
:attr:`PluginRegistry.errors`. It lives in ``tether.specs`` so that the named-resource table
(a spec) can read it; import it as ``tether.plugins``.
"""

from __future__ import annotations

import enum
import importlib
import logging
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tether.specs.fractionals import Fractionals
    from tether.specs.plugin_errors import RegistrationError

log = logging.getLogger(__name__)

NAMESPACE = "tether_plugins"
F = TypeVar("F", bound=Callable[..., Any])


class PluginType(str, enum.Enum):
    """A kind of plugin; the value is its entry-point group."""

    SCHEDULER = "tether.schedulers"
    NAMED_RESOURCE = "tether.named_resources"
    TRACKER = "tether.tracker"
    EVENT_HANDLER = "tether.event_handlers"

    @property
    def namespace(self) -> str:
        """The namespace package searched for it, e.g. ``tether_plugins.schedulers``."""
        return f"{NAMESPACE}.{self.value.removeprefix('tether.')}"


class PluginSource(enum.IntFlag):
    """Where :func:`registry` looks for plugins (combine with ``|``, test with ``in``).

    ``$TETHER_PLUGINS_SOURCE`` (TorchX: ``$TORCHX_PLUGINS_SOURCE``) is its number: ``0``
    none, ``1`` namespace packages only, ``2`` entry points only, ``3`` both (the default).
    """

    NONE = 0
    NAMESPACE_PKG = enum.auto()
    ENTRYPOINT = enum.auto()


ALL_SOURCES = PluginSource.NAMESPACE_PKG | PluginSource.ENTRYPOINT
SOURCES_ENV = "TETHER_PLUGINS_SOURCE"


class register:  # TorchX's name: a decorator
    """Marks a function as a plugin of a kind, under its name (default: the function's).

    Use the class methods: ``@register.scheduler()``, ``@register.tracker()``,
    ``@register.named_resource(aliases=[...])``; ``register(PluginType.SCHEDULER, name=...)``
    also works. The function is returned unchanged but for two attributes.

    Args:
        type: The kind of plugin.
        name: Its name.
    """

    def __init__(self, type: PluginType, name: str | None = None) -> None:
        self._type = type
        self._name = name
        self._aliases: list[str] = []
        self._fractionals: Fractionals | None = None

    def __call__(self, fn: F) -> F:
        fn._plugin_type = self._type  # type: ignore[attr-defined]
        fn._plugin_name = self._name or fn.__name__  # type: ignore[attr-defined]
        fn._plugin_aliases = list(self._aliases)  # type: ignore[attr-defined]
        if self._fractionals:
            from tether.specs.fractionals import register_fractionals

            register_fractionals(fn, fn._plugin_name, self._fractionals, self._type)  # type: ignore[attr-defined]
        return fn

    @classmethod
    def scheduler(cls, name: str | None = None) -> register:
        """Registers a scheduler factory ``(session_name, **kwargs) -> Scheduler``."""
        return cls(PluginType.SCHEDULER, name)

    @classmethod
    def tracker(cls, name: str | None = None) -> register:
        """Registers a tracker factory ``(config) -> TrackerBase``."""
        return cls(PluginType.TRACKER, name)

    @classmethod
    def event_handler(cls, name: str | None = None) -> register:
        """Registers an event handler factory ``() -> logging.Handler``, named after the
        destination it serves (see :func:`tether.runner.events.get_logging_handler`)."""
        return cls(PluginType.EVENT_HANDLER, name)

    @classmethod
    def named_resource(cls, name: str | None = None, aliases: list[str] | None = None,
                       fractionals: Fractionals | None = None) -> register:
        """Registers a named resource factory ``() -> Resource`` (also under ``aliases``).

        With ``fractionals`` (``{fraction: suffix}``, or a function of the whole-host
        resource giving it, such as :func:`~tether.specs.fractionals.powers_of_two_gpus`),
        the factory takes ``fractional: float`` and each slice is registered too, as
        ``<name>_<suffix>`` (a module attribute of the factory's module); aliases get no
        slices. See :mod:`tether.specs.fractionals`.
        """
        reg = cls(PluginType.NAMED_RESOURCE, name)
        reg._aliases = list(aliases or [])
        reg._fractionals = fractionals
        return reg


class PluginRegistry:
    """The plugins of each kind, found on first use: those of the ``tether_plugins``
    namespace packages and those of the kind's entry-point group (an entry point wins over a
    namespace plugin of the same name, which is recorded as an error).

    Args:
        plugin_sources: Where to look (default: both).
    """

    def __init__(self, *, plugin_sources: PluginSource = ALL_SOURCES) -> None:
        self._sources = PluginSource(plugin_sources)
        self._cache: dict[PluginType, dict[str, Callable[..., Any]]] = {}
        self._namespace: dict[PluginType, dict[str, Callable[..., Any]]] = {}
        self._errors: list[RegistrationError] = []

    @property
    def plugin_sources(self) -> PluginSource:
        """Where this registry looks for plugins."""
        return self._sources

    @property
    def errors(self) -> list[RegistrationError]:
        """What was skipped so far (a copy)."""
        return list(self._errors)

    def get(self, plugin_type: PluginType) -> dict[str, Callable[..., Any]]:
        """The plugins of a kind by name (empty when none is installed); cached.

        Args:
            plugin_type: The kind.

        Returns:
            Name to factory.
        """
        if plugin_type not in self._cache:
            found = dict(self.namespace_plugins(plugin_type))
            if PluginSource.ENTRYPOINT in self._sources:
                self._add_entry_points(plugin_type, found)
            self._cache[plugin_type] = found
        return self._cache[plugin_type]

    def namespace_plugins(self, plugin_type: PluginType) -> dict[str, Callable[..., Any]]:
        """The plugins of a kind found in the namespace packages only (empty when this
        registry does not look there); cached. tether's own lookups read the entry-point
        groups themselves, lazily, and the namespace plugins through this.

        Args:
            plugin_type: The kind.

        Returns:
            Name to factory.
        """
        if plugin_type not in self._namespace:
            found: dict[str, Callable[..., Any]] = {}
            if PluginSource.NAMESPACE_PKG in self._sources:
                self._scan_root(plugin_type, found)
            self._namespace[plugin_type] = found
        return self._namespace[plugin_type]

    def _add_entry_points(self, kind: PluginType, found: dict[str, Callable[..., Any]]) -> None:
        from importlib.metadata import entry_points  # only when entry points are asked for

        for ep in entry_points(group=kind.value):
            try:
                obj = ep.load()
            except Exception as e:  # a broken plugin must not break tether
                self._fail(ep.value, f"{type(e).__name__}: {e}", ep.name, kind)
                continue
            if ep.name in found:
                self._fail(getattr(found[ep.name], "__module__", kind.namespace), (
                    f"registered both as a {kind.value!r} entry point ({ep.value}) and in the "
                    f"{kind.namespace} namespace package: the entry point wins; remove one"),
                    ep.name, kind)
            found[ep.name] = obj

    def info(self, plugin_type: PluginType | None = None) -> Any:
        """Copies of the plugins: of one kind, or of every kind keyed by :class:`PluginType`.

        Args:
            plugin_type: The kind, or None for all.

        Returns:
            Name to factory, or kind to that.
        """
        if plugin_type is not None:
            return dict(self.get(plugin_type))
        return {pt: dict(self.get(pt)) for pt in PluginType}

    def clear(self) -> None:
        """Forgets what was found, so the next :meth:`get` searches again."""
        global _REGISTRY
        self._cache.clear()
        self._namespace.clear()
        self._errors.clear()
        _REGISTRY = None  # the next registry() reads $TETHER_PLUGINS_SOURCE again

    def __repr__(self) -> str:
        counts = ", ".join(f"{pt.name.lower()}={len(v)}" for pt, v in self._cache.items())
        return f"PluginRegistry({counts}; errors={len(self._errors)})"

    def _fail(self, module: str, error: str, name: str | None = None,
              kind: PluginType | None = None) -> None:
        from tether.specs.plugin_errors import RegistrationError

        log.warning("plugin %s skipped: %s", name or module, error)
        self._errors.append(RegistrationError(
            module, error, name, kind.name.lower() if kind else None))

    def _import(self, fqn: str) -> ModuleType | None:
        try:
            return importlib.import_module(fqn)
        except Exception as e:  # a broken plugin must not break tether
            self._fail(fqn, f"{type(e).__name__}: {e}")
            return None

    def _scan_root(self, kind: PluginType, found: dict[str, Callable[..., Any]]) -> None:
        try:
            pkg = importlib.import_module(kind.namespace)
        except ModuleNotFoundError as e:
            if e.name and (kind.namespace == e.name or kind.namespace.startswith(e.name + ".")):
                return  # nothing installed
            self._fail(kind.namespace, f"{type(e).__name__}: {e}")
            return
        except Exception as e:
            self._fail(kind.namespace, f"{type(e).__name__}: {e}")
            return
        self._scan(pkg, kind, found)

    def _scan(self, pkg: ModuleType, kind: PluginType,
              found: dict[str, Callable[..., Any]]) -> None:
        seen: set[str] = set()
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
            seen.add(info.name)
            if not info.name.startswith("_"):
                self._visit(f"{pkg.__name__}.{info.name}", kind, found)
        for root in getattr(pkg, "__path__", []):  # sub-directories without __init__.py
            for child in sorted(Path(root).iterdir()) if Path(root).is_dir() else []:
                if (child.is_dir() and child.name not in seen and child.name.isidentifier()
                        and not child.name.startswith("_") and any(child.glob("*.py"))):
                    seen.add(child.name)
                    self._visit(f"{pkg.__name__}.{child.name}", kind, found)

    def _visit(self, fqn: str, kind: PluginType, found: dict[str, Callable[..., Any]]) -> None:
        mod = self._import(fqn)
        if mod is None:
            return
        self._collect(mod, kind, found)
        if hasattr(mod, "__path__"):
            self._scan(mod, kind, found)

    def _collect(self, mod: ModuleType, kind: PluginType,
                 found: dict[str, Callable[..., Any]]) -> None:
        for attr in dir(mod):
            obj = getattr(mod, attr)
            actual = getattr(obj, "_plugin_type", None)
            if not callable(obj) or actual is None or obj.__module__ != mod.__name__:
                continue  # not a plugin, or one imported from elsewhere
            name = str(getattr(obj, "_plugin_name", attr))
            if actual != kind:
                self._fail(mod.__name__, (
                    f"is a {actual.name.lower()} but is under the {kind.name.lower()} "
                    f"namespace: use @register.{kind.name.lower()}() or move it to "
                    f"{actual.namespace}"), name, actual)
                continue
            for key in (name, *getattr(obj, "_plugin_aliases", [])):
                if key in found and found[key] is not obj:
                    self._fail(mod.__name__, "duplicate: another plugin has this name; "
                               "the first one found is kept", key, kind)
                else:
                    found[key] = obj


_REGISTRY: PluginRegistry | None = None


def registry() -> PluginRegistry:
    """The process's plugin registry (one instance; ``registry().clear()`` searches again).

    ``$TETHER_PLUGINS_SOURCE`` chooses where it looks (see :class:`PluginSource`).

    Returns:
        The registry.

    Raises:
        SpecError: When ``$TETHER_PLUGINS_SOURCE`` is not 0, 1, 2 or 3.
    """
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = PluginRegistry(plugin_sources=_sources_from_env())
    return _REGISTRY


def entry_points_enabled() -> bool:
    """Whether plugins are read from entry-point groups (``$TETHER_PLUGINS_SOURCE``)."""
    return PluginSource.ENTRYPOINT in registry().plugin_sources


def _sources_from_env() -> PluginSource:
    import os

    raw = os.environ.get(SOURCES_ENV, "").strip()
    if not raw:
        return ALL_SOURCES
    if raw not in ("0", "1", "2", "3"):
        from tether.errors import SpecError

        raise SpecError(
            f"${SOURCES_ENV}={raw!r} is not allowed: use 0 (no plugins), 1 (namespace "
            "packages only), 2 (entry points only) or 3 (both, the default)"
        )
    return PluginSource(int(raw))
