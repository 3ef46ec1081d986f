"""Fractional named resources: slices of one host registered under ``<name>_<suffix>``.

TorchX's ``torchx.plugins`` helpers, used as ``@register.named_resource(fractionals=...)``
on a factory that takes ``fractional: float``::

    from tether.plugins import WHOLE, powers_of_two_gpus, register

    @register.named_resource(fractionals=powers_of_two_gpus)
    def my_gpu(fractional: float = WHOLE) -> Resource:
        return Resource(cpu=int(96 * fractional), gpu=int(8 * fractional),
                        memMB=int(1024 * 1024 * fractional))

registers ``my_gpu`` and ``my_gpu_8``, ``my_gpu_4``, ``my_gpu_2``, ``my_gpu_1``; a slice
smaller than the whole host is tagged fractional (``Resource.is_fractional()``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from tether.errors import SpecError, SpecTypeError
from tether.specs.resources import Resource, resource_tags

WHOLE: float = 1.0
"""The whole host: all its CPUs, memory and GPUs."""
HALF: float = 0.5
"""Half of every resource of the host."""
QUARTER: float = 0.25
"""A quarter of every resource of the host."""
EIGHTH: float = 0.125
"""An eighth of every resource of the host."""
SIXTEENTH: float = 0.0625
"""A sixteenth of every resource of the host."""

Fractionals = Callable[[Resource], dict[float, str]] | Mapping[float, str]
"""``{fraction: suffix}``, or a function of the whole-host resource giving it."""


def powers_of_two_gpus(resource: Resource) -> dict[float, str]:
    """Every power-of-two GPU slice of a host, suffixed by its GPU count.

    An 8-GPU host gives ``{1.0: "8", 0.5: "4", 0.25: "2", 0.125: "1"}``.

    Args:
        resource: The whole host.

    Returns:
        Fraction to suffix.

    Raises:
        SpecError: When the host's GPU count is not a positive power of two.
    """
    gpus = resource.gpu
    if gpus <= 0 or gpus & (gpus - 1):
        raise SpecError(
            f"powers_of_two_gpus: resource.gpu = {gpus} must be a positive power of two "
            "(1, 2, 4, 8...) to cut into power-of-two slices"
        )
    out: dict[float, str] = {}
    fraction = WHOLE
    while int(gpus * fraction) > 0:
        out[fraction] = str(int(gpus * fraction))
        fraction /= 2
    return out


def halve_mem_down_to(*, minGiB: int) -> Callable[[Resource], dict[float, str]]:
    """Slices of a host by halving its memory, suffixed by their GiB, down to ``minGiB``.

    A 64 GiB host with ``minGiB=8`` gives ``{1.0: "64", 0.5: "32", 0.25: "16", 0.125: "8"}``.

    Args:
        minGiB: The smallest slice's memory in GiB (TorchX's name); at least the odd part of
            the host's GiB (the GiB with every factor 2 removed), so that every slice is a
            whole number of GiB.

    Returns:
        The function of the whole-host resource giving fraction to suffix.
    """

    def fractionals(resource: Resource) -> dict[float, str]:
        mem_mb = resource.memMB
        if mem_mb <= 0 or mem_mb % 1024:
            raise SpecError(
                f"halve_mem_down_to: resource.memMB = {mem_mb} must be a positive whole "
                "number of GiB (a multiple of 1024)"
            )
        gib = mem_mb // 1024
        odd = gib
        while odd % 2 == 0:
            odd //= 2
        if minGiB < odd:
            raise SpecError(
                f"halve_mem_down_to: minGiB = {minGiB} is below {odd}, the odd part of the "
                f"host's {gib} GiB: halving below it gives fractions of a GiB; use "
                f"minGiB >= {odd}"
            )
        out: dict[float, str] = {}
        fraction = WHOLE
        while int(gib * fraction) >= minGiB:
            out[fraction] = str(int(gib * fraction))
            fraction /= 2
        return out

    return fractionals


def register_fractionals(
    fn: Callable[..., Resource], name: str, fractionals: Fractionals, plugin_type: Any
) -> list[str]:
    """Adds a ``<name>_<suffix>`` factory for each slice to ``fn``'s module.

    Each is a module attribute marked as a plugin (so the registry finds it, and
    ``from my_module import my_gpu_4`` works) whose resources carry their name and whether
    they are a fraction of the host.

    Args:
        fn: The decorated factory; it must take ``fractional``.
        name: The name it is registered under.
        fractionals: The slices.
        plugin_type: The plugin kind to mark the factories with.

    Returns:
        The names added.

    Raises:
        SpecTypeError: When ``fn`` takes no ``fractional`` parameter.
        SpecError: When a slice's name is already taken in the module.
    """
    try:
        inspect.signature(fn).bind(fractional=WHOLE)
    except TypeError:
        raise SpecTypeError(
            f"named resource {name!r} ({fn.__module__}.{fn.__qualname__}) is registered with "
            "fractionals= but takes no 'fractional' parameter: declare "
            "'fractional: float = WHOLE'"
        ) from None
    table = fractionals(fn(fractional=WHOLE)) if callable(fractionals) else fractionals
    module = sys.modules[fn.__module__]
    added: list[str] = []
    for fraction, suffix in dict(table).items():
        frac_name = f"{name}_{suffix}"
        if hasattr(module, frac_name):
            raise SpecError(
                f"fractional named resource {frac_name!r} (of {name!r}): {fn.__module__} "
                "already has an attribute of that name; rename one of them"
            )
        factory = _slice(fn, frac_name, float(fraction))
        factory._plugin_type = plugin_type  # type: ignore[attr-defined]
        factory._plugin_name = frac_name  # type: ignore[attr-defined]
        factory._plugin_base_name = name  # type: ignore[attr-defined]
        setattr(module, frac_name, factory)
        added.append(frac_name)
    return added


def _slice(fn: Callable[..., Resource], frac_name: str, fraction: float
           ) -> Callable[[], Resource]:
    def factory() -> Resource:
        res = fn(fractional=fraction)
        res.tags[resource_tags.RESOURCE_NAME] = frac_name
        res.tags[resource_tags.IS_FRACTIONAL] = fraction != WHOLE
        return res

    factory.__module__ = fn.__module__
    factory.__name__ = factory.__qualname__ = frac_name
    return factory
