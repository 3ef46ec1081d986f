"""Hardware requirements of one replica: :class:`Resource`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tether.specs.checks import (
    Problem,
    check_mapping,
    check_number,
    check_str,
    got,
    raise_type_problems,
    short_repr,
)


class resource_tags:
    """Keys of :attr:`Resource.tags` that tether reads."""

    RESOURCE_NAME = "resource_name"
    """The named resource a Resource was made from (``named_resources`` sets it)."""
    IS_FRACTIONAL = "is_fractional"
    """True when the resource is part of a host rather than whole hosts."""


@dataclass
class Resource:
    """Hardware a single replica of a role asks for.

    Each count is a number >= 0, or -1: "no request, the scheduler's default" (what
    :data:`NULL_RESOURCE` holds). A ``cpu`` or ``memMB`` of 0 asks for nothing too: schedulers
    set a CPU or memory request only when it is positive. Any other negative value is refused
    at dryrun (:func:`tether.specs.validate`) with an error naming the field and what is
    allowed; the constructor checks types only, as TorchX's.

    Attributes:
        cpu: Number of logical CPUs (may be fractional on container schedulers); 0 or -1:
            no request.
        gpu: Number of GPUs (0: none; -1: the scheduler's default, none on every backend).
        memMB: Memory in MiB; 0 or -1: no request (no memory limit where the scheduler
            would set one).
        capabilities: Scheduler-specific capabilities (for example the instance type a
            named resource stands for); container schedulers turn them into node selectors.
        devices: Extended devices and their counts, e.g. ``{"vpc.amazonaws.com/efa": 4}``.
        tags: Free-form labels describing the resource (not interpreted by schedulers):
            str keys, values of str, bool, int or float. A named resource carries its name
            under :attr:`resource_tags.RESOURCE_NAME`.
    """

    cpu: float
    gpu: int
    memMB: int
    capabilities: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        gpu: Any = self.gpu
        mem: Any = self.memMB
        if isinstance(gpu, float) and gpu.is_integer():
            self.gpu = int(gpu)  # 2.0 GPUs: a whole number, kept as an int
        if isinstance(mem, float) and mem.is_integer():
            self.memMB = int(mem)
        raise_type_problems(check_resource(self), "Resource")

    def is_fractional(self) -> bool:
        """Whether the resource is a fraction of a host (tagged
        ``resource_tags.IS_FRACTIONAL: True``, as a named resource for part of a machine)."""
        return self.tags.get(resource_tags.IS_FRACTIONAL) is True

    def get_resource_name(self) -> str | None:
        """The named resource this was made from (its :attr:`resource_tags.RESOURCE_NAME`
        tag), or None."""
        name = self.tags.get(resource_tags.RESOURCE_NAME)
        return None if name is None else str(name)

    @staticmethod
    def copy(original: Resource, **capabilities: Any) -> Resource:
        """Returns a deep copy of ``original`` with ``capabilities`` added or replaced.

        Args:
            original: The resource to copy.
            **capabilities: Capabilities to merge into the copy.

        Returns:
            The new resource.
        """
        res = copy.deepcopy(original)
        res.capabilities.update(capabilities)
        return res


def check_resource(res: Any, where: str = "resource") -> list[Problem]:
    """Checks a :class:`~tether.specs.Resource`.

    Args:
        res: The resource.
        where: Prefix naming it in messages.

    Returns:
        The problems found.
    """
    if not isinstance(res, Resource):
        return [Problem(f"{where} must be a Resource, got {got(res)}", True)]
    out = check_number(f"{where}.cpu", res.cpu, integral=False)
    out += check_number(f"{where}.gpu", res.gpu, integral=True)
    out += check_number(f"{where}.memMB", res.memMB, integral=True)
    for fld in ("capabilities", "devices", "tags"):
        out += check_mapping(f"{where}.{fld}", getattr(res, fld))
    if not out:
        for dev, count in res.devices.items():
            out += check_str(f"{where}.devices key", dev, empty_ok=False)
            out += check_number(
                f"{where}.devices[{short_repr(dev)}]", count, integral=True, default_ok=False
            )
        for k, v in res.tags.items():
            out += check_str(f"{where}.tags key", k)
            if not isinstance(v, (str, bool, int, float)):
                out.append(
                    Problem(
                        f"{where}.tags[{k!r}] must be a str, bool, int or float, got {got(v)}",
                        True,
                    )
                )
        for k in res.capabilities:
            out += check_str(f"{where}.capabilities key", k)
    return out


NULL_RESOURCE = Resource(cpu=-1, gpu=-1, memMB=-1)
"""Placeholder for "the scheduler's default": every field is -1."""
