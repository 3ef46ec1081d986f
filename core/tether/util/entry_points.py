"""tether's entry points, read once and cached on disk.

Scanning the installed distributions (``importlib.metadata``) costs tens of milliseconds per
command; most commands need a few ``tether.*`` groups. :func:`entry_points` reads every
``tether.*`` group in one scan and writes them to
``$XDG_CACHE_HOME/tether/entry-points-<env>-<path>.json`` (default ``~/.cache/tether``; one
file per environment and ``sys.path``, at most 16 per environment), keyed by the entries of
``sys.path`` (but the working directory) and their modification times: installing,
removing or upgrading a distribution changes the directory holding its metadata, which
changes the key, so the next call scans again. A cache hit imports neither
``importlib.metadata`` nor ``email``.

Nothing is scanned at import time. ``TETHER_NO_ENTRY_POINT_CACHE=1`` disables the file.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import zlib

TYPE_CHECKING = False  # `typing` is not imported at start-up
if TYPE_CHECKING:
    from typing import Any, Protocol

GROUP_PREFIX = "tether."
"""The groups cached (other groups are read from the installed metadata directly)."""

NO_CACHE_ENV = "TETHER_NO_ENTRY_POINT_CACHE"
_FORMAT = 1


if TYPE_CHECKING:

    class EntryPointLike(Protocol):
        """What tether needs of an entry point (``importlib.metadata.EntryPoint`` fits)."""

        @property
        def name(self) -> str:
            """The key."""

        @property
        def value(self) -> str:
            """``module`` or ``module:attr``."""


class EntryPointInfo:
    """One entry point: what ``importlib.metadata.EntryPoint`` offers that tether uses.

    Attributes:
        name: The key (a component prefix, a command or scheduler name...).
        value: ``module`` or ``module:attr``.
        group: The group.
    """

    __slots__ = ("group", "name", "value")

    def __init__(self, name: str, value: str, group: str) -> None:
        self.name = name
        self.value = value
        self.group = group

    def __repr__(self) -> str:
        return f"EntryPointInfo(name={self.name!r}, value={self.value!r}, group={self.group!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntryPointInfo):
            return NotImplemented
        return (self.name, self.value, self.group) == (other.name, other.value, other.group)

    def __hash__(self) -> int:
        return hash((self.name, self.value, self.group))

    def load(self) -> Any:
        """Imports the module and returns the object the entry point names."""
        module, _, attrs = self.value.partition(":")
        target: Any = importlib.import_module(module.strip())
        for attr in filter(None, attrs.strip().split(".")):
            target = getattr(target, attr)
        return target


_memo: dict[str, dict[str, list[EntryPointInfo]]] = {}


def _key() -> str:
    parts = [sys.prefix]
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    for entry in sys.path:
        if entry in ("", cwd):  # `python -m`/`-c` put the working directory first
            continue
        try:
            parts.append(f"{entry}={os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            continue
    return "\n".join(parts)


def cache_file(key: str | None = None) -> str:
    """Where the cache of this Python environment and search path lives.

    One file per environment and list of ``sys.path`` entries (not their times): a script
    (its directory first on the path) and ``python -c`` in the same environment each keep
    their own, instead of replacing each other's at every command.

    Args:
        key: The cache key (default: this process's).

    Returns:
        The file's path.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    env_id = f"{zlib.crc32(sys.prefix.encode()):08x}"
    entries = "\n".join(line.rpartition("=")[0] for line in (key or _key()).splitlines()[1:])
    return os.path.join(
        base, "tether", f"entry-points-{env_id}-{zlib.crc32(entries.encode()):08x}.json"
    )


MAX_FILES_PER_ENV = 16
"""Cache files kept per environment (the least recently written beyond go)."""


def _prune(path: str) -> None:
    """Keeps the newest :data:`MAX_FILES_PER_ENV` files of ``path``'s environment."""
    folder, name = os.path.split(path)
    env_prefix = name.rsplit("-", 1)[0] + "-"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(env_prefix) and n.endswith(".json")]
        if len(names) <= MAX_FILES_PER_ENV:
            return
        stamped = []
        for n in names:
            with contextlib.suppress(OSError):
                stamped.append((os.stat(os.path.join(folder, n)).st_mtime_ns, n))
        for _, n in sorted(stamped)[: len(stamped) - MAX_FILES_PER_ENV]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, n))
    except OSError:
        return


def _scan() -> dict[str, list[EntryPointInfo]]:
    from importlib.metadata import distributions

    groups: dict[str, list[EntryPointInfo]] = {}
    seen: set[str] = set()
    for dist in distributions():
        # one distribution per name, the first on sys.path (as importlib.metadata does)
        name = getattr(dist, "_normalized_name", None) or str(dist.metadata["Name"])
        if name in seen:
            continue
        seen.add(name)
        for ep in dist.entry_points:
            if ep.group.startswith(GROUP_PREFIX):
                groups.setdefault(ep.group, []).append(
                    EntryPointInfo(ep.name, ep.value, ep.group)
                )
    return groups


def _read(path: str, key: str) -> dict[str, list[EntryPointInfo]] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("key") != key:
        return None
    try:
        return {
            group: [EntryPointInfo(str(n), str(v), group) for n, v in eps]
            for group, eps in data["groups"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _write(path: str, key: str, groups: dict[str, list[EntryPointInfo]]) -> None:
    data = {
        "format": _FORMAT,
        "key": key,
        "groups": {g: [[e.name, e.value] for e in eps] for g, eps in groups.items()},
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
        _prune(path)
    except OSError:  # a read-only home: the cache is an optimisation only
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _groups() -> dict[str, list[EntryPointInfo]]:
    key = _key()
    groups = _memo.get(key)
    if groups is not None:
        return groups
    use_file = os.environ.get(NO_CACHE_ENV, "") in ("", "0", "false")
    path = cache_file(key)
    groups = _read(path, key) if use_file else None
    if groups is None:
        groups = _scan()
        if use_file:
            _write(path, key, groups)
    _memo.clear()
    _memo[key] = groups
    return groups


def entry_points(group: str) -> list[EntryPointInfo]:
    """The installed entry points of a group, in the installed metadata's order.

    Args:
        group: The group, e.g. ``tether.components``.

    Returns:
        Its entry points (one per name and distribution).
    """
    if not group.startswith(GROUP_PREFIX):
        from importlib.metadata import entry_points as installed

        return [EntryPointInfo(ep.name, ep.value, ep.group) for ep in installed(group=group)]
    return list(_groups().get(group, []))


def clear_cache() -> None:
    """Forgets what this process read (the file is checked again on the next call)."""
    _memo.clear()
