"""Overlays: backend-specific fields merged into a scheduler's native request.

An overlay is a plain nested dict (JSON-like) that a backend merges into the request it
rendered, as the last step of its render. It is the escape hatch for native fields that
:class:`~tether.specs.Role` does not model (a pod's ``hostIPC``, a container's
``lifecycle``, an sbatch option...).

Merge rules (``apply_overlay(base, overlay)``, in place):

* dict into dict: merged key by key, recursively (upsert);
* list into list: the overlay's items are appended (:class:`JOIN`, the default);
* anything else: the overlay's value replaces the base's (:class:`PUT`, the default for
  scalars).

Operators change the rule for one key:

* ``PUT(value)``: replace the base's value whole (a list or dict is not merged);
* ``JOIN(items)``: append to the base's list (the default for lists; spelled out for clarity);
* ``DEL``: remove the key from the base (no error when it is absent).

Roles carry overlays in :attr:`Role.overlays`, keyed by target name (see each backend's
docs, e.g. ``"kubernetes"`` for the pod template and ``"kubernetes.container"`` for the
role's container). A backend applies them with :func:`apply_role_overlay`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.specs.app import Role


class OverlayError(TypeError):
    """An overlay cannot be merged: names the key path, both values and what is allowed."""


@dataclass(frozen=True)
class PUT:
    """Replace the base's value with ``value`` (no merge)."""

    value: Any


@dataclass(frozen=True)
class JOIN:
    """Append ``value`` (a list) to the base's list; the base key is created when absent."""

    value: list[Any]


class _Del:
    """Sentinel type of :data:`DEL`."""

    _instance: _Del | None = None

    def __new__(cls) -> _Del:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEL"


DEL = _Del()
"""Remove the key from the base."""


def _plain(value: Any) -> Any:
    """A deep copy of ``value`` with operators resolved (for values that land on new keys)."""
    if isinstance(value, PUT | JOIN):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not DEL}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return copy.deepcopy(value)


def apply_overlay(
    base: MutableMapping[str, Any], overlay: Mapping[str, Any], path: str = ""
) -> None:
    """Merges ``overlay`` into ``base`` in place (rules in the module docstring).

    Args:
        base: The native request (or a part of it), modified in place.
        overlay: The overlay.
        path: The key path of ``base`` (for error messages).

    Raises:
        OverlayError: When a dict is merged into a non-dict, a list into a non-list, or
            ``JOIN`` holds something other than a list.
    """
    if not isinstance(overlay, Mapping):
        raise OverlayError(f"overlay at {path or '<root>'!r} must be a dict, got {overlay!r}")
    for key, value in overlay.items():
        where = f"{path}.{key}" if path else str(key)
        if value is DEL:
            base.pop(key, None)
        elif isinstance(value, PUT):
            base[key] = _plain(value.value)
        elif isinstance(value, JOIN):
            if not isinstance(value.value, list):
                raise OverlayError(f"JOIN at {where!r} takes a list, got {value.value!r}")
            current = base.setdefault(key, [])
            if not isinstance(current, list):
                raise OverlayError(
                    f"JOIN at {where!r}: the base value {current!r} is not a list; use PUT "
                    "to replace it"
                )
            current.extend(_plain(value.value))
        elif key not in base:
            base[key] = _plain(value)
        elif isinstance(value, Mapping):
            current = base[key]
            if not isinstance(current, MutableMapping):
                raise OverlayError(
                    f"overlay at {where!r} is a dict but the base value {current!r} is not; "
                    "use PUT to replace it"
                )
            apply_overlay(current, value, where)
        elif isinstance(value, list):
            current = base[key]
            if not isinstance(current, list):
                raise OverlayError(
                    f"overlay at {where!r} is a list but the base value {current!r} is not; "
                    "use PUT to replace it"
                )
            current.extend(_plain(value))
        else:
            base[key] = _plain(value)


def apply_role_overlay(native: MutableMapping[str, Any], role: Role, target: str) -> None:
    """Applies ``role.overlays[target]`` (when set) to a backend's native request in place.

    This is the one call a backend's render makes, last, for each native object it builds
    from a role.

    Args:
        native: The rendered object (pod template, container, sbatch options...).
        role: The role it was rendered from.
        target: The overlay's name, e.g. ``"kubernetes"``.
    """
    overlay = role.overlays.get(target)
    if overlay:
        apply_overlay(native, overlay, target)
