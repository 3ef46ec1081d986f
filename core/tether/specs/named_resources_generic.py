"""Generic named resources: t-shirt sizes that stand for no particular cloud instance.

They are defaults for components and examples (``dist.ddp -h gpu.small``); register your own
named resources for the hosts you really have. The sizes are TorchX's: GPU hosts have 8 CPUs
and 32 GiB per GPU; CPU hosts follow AWS's T2 general-purpose ratios. No devices (EFA...)
are modelled. Each resource is tagged with its name (``Resource.get_resource_name()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tether.specs.resources import Resource, resource_tags

GiB = 1024

# name: (cpu, gpu, memory MiB)
_SIZES: dict[str, tuple[int, int, int]] = {
    "gpu.small": (8, 1, 32 * GiB),
    "gpu.medium": (16, 2, 64 * GiB),
    "gpu.large": (32, 4, 128 * GiB),
    "gpu.xlarge": (64, 8, 256 * GiB),
    "cpu.nano": (1, 0, 512),
    "cpu.micro": (1, 0, 1 * GiB),
    "cpu.small": (1, 0, 2 * GiB),
    "cpu.medium": (2, 0, 4 * GiB),
    "cpu.large": (2, 0, 8 * GiB),
    "cpu.xlarge": (8, 0, 32 * GiB),
}


def _factory(name: str) -> Callable[[], Resource]:
    cpu, gpu, mem = _SIZES[name]

    def make() -> Resource:
        return Resource(cpu=cpu, gpu=gpu, memMB=mem, tags={resource_tags.RESOURCE_NAME: name})

    make.__name__ = name.replace(".", "_")
    return make


NAMED_RESOURCES: Mapping[str, Callable[[], Resource]] = {n: _factory(n) for n in _SIZES}
"""Name -> factory returning a fresh :class:`~tether.specs.Resource`."""
