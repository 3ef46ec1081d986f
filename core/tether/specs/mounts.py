"""Mounts of a role: bind mounts, named volumes and devices, and the CLI mount syntax."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tether.errors import SpecError


class MountOptionError(SpecError, KeyError):
    """A mount without ``type=`` first, or with an option its type does not take.

    Both a ``ValueError`` (tether's :class:`SpecError`) and a ``KeyError`` (what TorchX's
    ``parse_mounts`` raises for these); ``str()`` is the message itself.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class BindMount:
    """Mounts a host path into the replica.

    Attributes:
        src_path: Path on the host.
        dst_path: Path inside the replica.
        read_only: Mount read-only.
    """

    src_path: str
    dst_path: str
    read_only: bool = False


@dataclass
class VolumeMount:
    """Mounts a named persistent volume (a Kubernetes PVC, a Docker volume...).

    Attributes:
        src: Name of the volume.
        dst_path: Path inside the replica.
        read_only: Mount read-only.
    """

    src: str
    dst_path: str
    read_only: bool = False


@dataclass
class DeviceMount:
    """Exposes a host device (e.g. ``/dev/fuse``) to the replica.

    Attributes:
        src_path: Device path on the host.
        dst_path: Device path inside the replica.
        permissions: Any of ``r``, ``w`` and ``m`` (mknod).
    """

    src_path: str
    dst_path: str
    permissions: str = "rwm"


Mount = BindMount | VolumeMount | DeviceMount

_KEYS = {
    "bind": {"src", "dst", "readonly"},
    "volume": {"src", "dst", "readonly"},
    "device": {"src", "dst", "perm"},
}
_ALIASES = {"source": "src", "destination": "dst", "target": "dst", "read_only": "readonly"}


def _parse_one(spec: str) -> Mount:
    opts: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = _ALIASES.get(key.strip().lower(), key.strip().lower())
        opts[key] = value.strip() if sep else ""
    kind = opts.pop("type", None)
    if kind is None:
        raise MountOptionError(
            f"mount {spec!r} has no type: start it with type=bind, type=volume or type=device"
        )
    if kind not in _KEYS:
        raise SpecError(f"mount {spec!r}: unknown type {kind!r}; allowed: bind, volume, device")
    unknown = set(opts) - _KEYS[kind]
    if unknown:
        raise MountOptionError(
            f"mount {spec!r}: unknown option(s) {sorted(unknown)} for type={kind}; "
            f"allowed: {sorted(_KEYS[kind])}"
        )
    if "src" not in opts or not opts["src"]:
        raise SpecError(f"mount {spec!r}: src= is required")
    readonly = "readonly" in opts and opts["readonly"].lower() not in ("false", "0", "no")
    if kind == "bind":
        if not opts.get("dst"):
            raise SpecError(f"mount {spec!r}: dst= is required")
        src = opts["src"]
        if src.startswith("~"):  # as TorchX: a home-relative host path is expanded
            src = os.path.expanduser(src)
        return BindMount(src_path=src, dst_path=opts["dst"], read_only=readonly)
    if kind == "volume":
        if not opts.get("dst"):
            raise SpecError(f"mount {spec!r}: dst= is required")
        return VolumeMount(src=opts["src"], dst_path=opts["dst"], read_only=readonly)
    perm = opts.get("perm") or "rwm"
    if set(perm) - set("rwm"):
        raise SpecError(f"mount {spec!r}: perm={perm!r} may only contain r, w and m")
    return DeviceMount(src_path=opts["src"], dst_path=opts.get("dst") or opts["src"],
                       permissions=perm)


def parse_mounts(opts: list[str]) -> list[Mount]:
    """Parses mounts written as on the command line.

    Each entry is ``type=<bind|volume|device>,src=...,dst=...[,readonly]`` (devices take
    ``perm=rwm`` and default ``dst`` to ``src``). For convenience a single string may hold
    several mounts separated by ``;``, and an entry may be split across list items the way a
    shell splits ``type=bind src=/a dst=/b`` (a new mount starts at each ``type=``).

    Args:
        opts: The mount strings.

    Returns:
        The parsed mounts, in order.

    A bind mount's ``src`` starting with ``~`` is expanded to the home directory.

    Raises:
        MountOptionError: (a ``KeyError`` and a ``ValueError``) When a mount does not start
            with ``type=`` or has an option its type does not take.
        SpecError: When a mount is otherwise malformed; the message names the mount and what
            is allowed.
    """
    specs: list[str] = []
    for raw in opts:
        for piece in raw.split(";"):
            piece = piece.strip()
            if not piece:
                continue
            if piece.startswith("type=") or not specs:
                specs.append(piece)
            else:
                specs[-1] = f"{specs[-1]},{piece}"
    return [_parse_one(s) for s in specs]
