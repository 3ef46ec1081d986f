"""Named resources: t-shirt sizes and instance types looked up with :func:`resource`.

Sources, later ones overriding earlier ones:

1. the generic table (``gpu.small`` ... ``cpu.xlarge``,
   :mod:`tether.specs.named_resources_generic`) and AWS instance types
   (``aws_p3.2xlarge``...);
2. factories registered in the entry-point group ``tether.named_resources``
   (``name = pkg.module:factory``, a factory takes no argument and returns a Resource);
3. the ``NAMED_RESOURCES`` dict of the module named by ``$TETHER_CUSTOM_NAMED_RESOURCES``.

``NULL`` and ``MISSING`` (as in TorchX) give ``NULL_RESOURCE`` (every field -1: the
scheduler's default). The registry is built on first use, not at import.
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Callable, Iterator, Mapping

from tether.specs.resources import NULL_RESOURCE, Resource, resource_tags

GiB = 1024

ENTRY_POINT_GROUP = "tether.named_resources"
CUSTOM_ENV = "TETHER_CUSTOM_NAMED_RESOURCES"

_registry: dict[str, Callable[[], Resource]] | None = None


def _load() -> dict[str, Callable[[], Resource]]:
    from tether.specs.named_resources_aws import NAMED_RESOURCES as AWS
    from tether.specs.named_resources_generic import NAMED_RESOURCES as GENERIC

    reg: dict[str, Callable[[], Resource]] = {**GENERIC, **AWS}
    # read from the installed metadata (specs imports nothing of tether, so not through
    # tether.util.entry_points' cache): only on the first named-resource lookup of a process
    from importlib.metadata import entry_points

    from tether.specs.plugins import PluginType, entry_points_enabled, registry

    for ep in entry_points(group=ENTRY_POINT_GROUP) if entry_points_enabled() else ():
        reg[ep.name] = ep.load()
    for name, fn in registry().namespace_plugins(PluginType.NAMED_RESOURCE).items():
        reg.setdefault(name, _tagged(name, fn))  # tether_plugins.named_resources
    custom = os.environ.get(CUSTOM_ENV)
    if custom:
        try:
            mod = importlib.import_module(custom)
        except ImportError as e:
            raise ImportError(
                f"${CUSTOM_ENV}={custom!r} names a module that cannot be imported: {e}"
            ) from e
        table = getattr(mod, "NAMED_RESOURCES", None)
        if not isinstance(table, dict):
            raise TypeError(
                f"module {custom!r} (from ${CUSTOM_ENV}) must define a dict NAMED_RESOURCES "
                "mapping names to factories returning Resource"
            )
        reg.update(table)
    # TorchX's placeholders: a role that asks for no particular resource
    reg["NULL"] = reg["MISSING"] = _null_resource
    return reg


def _tagged(name: str, fn: Callable[[], Resource]) -> Callable[[], Resource]:
    """A plugin's factory whose resources carry their name, as TorchX's ``register`` does."""

    def factory() -> Resource:
        res = fn()
        res.tags.setdefault(resource_tags.RESOURCE_NAME, name)
        res.tags.setdefault(resource_tags.IS_FRACTIONAL, False)
        return res

    return factory


def _null_resource() -> Resource:
    return copy.deepcopy(NULL_RESOURCE)


def _factories() -> dict[str, Callable[[], Resource]]:
    global _registry
    if _registry is None:
        _registry = _load()
    return _registry


class NamedResources(Mapping[str, Resource]):
    """Every registered named resource, as TorchX's ``named_resources``.

    ``named_resources["gpu.small"]`` returns a fresh :class:`Resource` (an unknown name raises
    ``KeyError`` with close matches); iteration yields the names. The registry is read on
    first use.
    """

    def __getitem__(self, name: str) -> Resource:
        return get_named_resource(name)

    def __iter__(self) -> Iterator[str]:
        return iter(_factories())

    def __len__(self) -> int:
        return len(_factories())

    def __contains__(self, name: object) -> bool:
        return name in _factories()

    def factories(self) -> dict[str, Callable[[], Resource]]:
        """The factories by name (each returns a fresh Resource)."""
        return dict(_factories())

    def __call__(self) -> dict[str, Callable[[], Resource]]:
        """The factories by name: the earlier ``named_resources()`` form (same as
        :meth:`factories`)."""
        return self.factories()


named_resources = NamedResources()
"""The named-resource registry as a mapping: ``named_resources["aws_p4d.24xlarge"]``."""


def reload_named_resources() -> None:
    """Forgets the cached registry (after installing plugins or changing the env var)."""
    global _registry
    _registry = None


def get_named_resource(name: str) -> Resource:
    """Looks up a named resource.

    Args:
        name: A registered name, e.g. ``gpu.small`` or ``aws_p3.2xlarge``.

    Returns:
        A fresh Resource.

    Raises:
        KeyError: When the name is unknown; the message lists close matches.
    """
    reg = _factories()
    if name not in reg:
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(name, list(reg), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"unknown named resource {name!r}{hint} (see `tether runopts`/docs for the list; "
            f"register more via the {ENTRY_POINT_GROUP!r} entry point or ${CUSTOM_ENV})"
        )
    return reg[name]()


def get_named_resources(res: str) -> Resource:
    """TorchX's name for :func:`get_named_resource`.

    Args:
        res: A registered name.

    Returns:
        A fresh Resource.
    """
    return get_named_resource(res)


def resource(
    cpu: float | None = None,
    gpu: int | None = None,
    memMB: int | None = None,
    h: str | None = None,
) -> Resource:
    """Builds a Resource from a named resource or explicit values.

    When ``h`` is given it wins over the explicit values. Without it, missing values default to
    TorchX's: 2 CPUs, 0 GPU and 1024 MiB (an explicit 0 is kept, unlike TorchX).

    Args:
        cpu: Number of CPUs.
        gpu: Number of GPUs.
        memMB: Memory in MiB.
        h: A named resource.

    Returns:
        The resource.

    Raises:
        KeyError: When ``h`` is not a known name.
    """
    if h:
        return get_named_resource(h)
    return Resource(
        cpu=2 if cpu is None else cpu,
        gpu=0 if gpu is None else gpu,
        memMB=1024 if memMB is None else memMB,
    )
