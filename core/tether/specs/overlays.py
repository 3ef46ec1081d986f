"""Overlays: backend-specific fields merged into a scheduler's native request (as TorchX).

An overlay is a plain nested dict that a backend merges into the request it rendered, as the
last step of its render. It is the escape hatch for native fields that
:class:`~tether.specs.Role` does not model (a pod's ``hostIPC``, a container's
``lifecycle``...).

For users: :func:`set_overlay` stores an overlay on a role (or app) under
``metadata[namespace][kind]``; several calls accumulate::

    set_overlay(role, "kubernetes", "V1Pod", {"spec": {"hostIPC": True}})
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {
        JOIN("containers", on="name"): [{"name": "trainer", "lifecycle": {...}}]}})

Merge rules of :func:`apply_overlay` (``base`` is changed in place):

1. dict into dict: merged key by key, recursively;
2. list into list: the overlay's items are appended (a tuple replaces the list);
3. anything else: replaced; a dict or list against a value of another type is a
   :class:`OverlayError` naming the key.

Operators are dict *keys* built by functions: ``PUT("key")`` replaces the value whole,
``JOIN("key", on="name")`` merges list items that share the ``on`` field (others are
appended), ``DEL("key")`` removes the key (its value is ignored, by convention ``None``).

For backends: ``apply_overlay(native, get_overlay(role, "<backend>", "<Kind>"))`` last, after
:func:`validate_overlay` where some fields must come from the role instead; an
:class:`OverlaySpec` declares the namespace, kind and blocked keys once.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import SpecTypeError

if TYPE_CHECKING:
    from tether.specs.app import AppDef, Role

Overlay = dict[str, Any]

_PUT = "__put__:"
_JOIN = "__join__:"
_DEL = "__del__:"


FORMAT_KEY = "__tether_overlays__"
"""Set in ``metadata[namespace]`` by :func:`set_overlay`: the dict holds ``{kind: overlay}``."""


class OverlayError(SpecTypeError):
    """An overlay cannot be merged: names the key, both types and what to do instead."""


def _check_kind(kind: str) -> None:
    if kind == FORMAT_KEY:
        raise ValueError(f"overlay kind {kind!r} is reserved (it marks the nested form)")


def PUT(key: str) -> str:
    """Key that replaces ``key``'s value whole (no list append, no dict merge).

    Args:
        key: The field.

    Returns:
        The operator key to use in an overlay dict.
    """
    return f"{_PUT}{key}"


def JOIN(key: str, *, on: str) -> str:
    """Key that merges list items of ``key`` sharing the field ``on``; others are appended.

    Args:
        key: The list field (e.g. ``containers``).
        on: The field that identifies an item (e.g. ``name``).

    Returns:
        The operator key to use in an overlay dict.
    """
    return f"{_JOIN}{key}:{on}"


def DEL(key: str) -> str:
    """Key that removes ``key`` from the base (the backend's default applies).

    Args:
        key: The field.

    Returns:
        The operator key to use in an overlay dict (give it the value ``None``).
    """
    return f"{_DEL}{key}"


def _field(key: str) -> str:
    for prefix in (_PUT, _DEL):
        if key.startswith(prefix):
            return key[len(prefix) :]
    if key.startswith(_JOIN):
        return key[len(_JOIN) :].split(":", 1)[0]
    return key


def _drop_spellings(base: MutableMapping[str, Any], field: str, keep: str | None) -> None:
    for k in [k for k in base if _field(k) == field and k != keep]:
        del base[k]


def _join(base: MutableMapping[str, Any], key: str, value: Any, field: str) -> None:
    on = key[len(_JOIN) :].split(":", 1)[1] if ":" in key[len(_JOIN) :] else ""
    if not on:
        raise ValueError(f"malformed JOIN key {key!r}: build it with JOIN(field, on=key)")
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise OverlayError(f"JOIN({field!r}, on={on!r}) takes a list of dicts, got {value!r}")
    _drop_spellings(base, field, keep=field)
    current = base.get(field)
    if current is None:
        base[field] = copy.deepcopy(value)
        return
    if not isinstance(current, list) or not all(isinstance(i, dict) for i in current):
        raise OverlayError(f"JOIN({field!r}, on={on!r}): the base value is not a list of dicts")
    by_key = {item[on]: item for item in current if on in item}
    for item in value:
        match = by_key.get(item.get(on)) if on in item else None
        if match is None:
            current.append(copy.deepcopy(item))
        else:
            match.update({k: copy.deepcopy(v) for k, v in item.items() if k != on})


def _accumulate_join(base: MutableMapping[str, Any], key: str, value: Any, field: str) -> None:
    """A JOIN stored by :func:`set_overlay`: joined into what the field already holds."""
    held = base.get(key)
    if held is None and isinstance(base.get(field), list):
        held = base[field]
    merged: dict[str, Any] = {} if held is None else {field: copy.deepcopy(held)}
    _join(merged, key, value, field)
    _drop_spellings(base, field, keep=None)
    base[key] = merged[field]


def _merge(base: MutableMapping[str, Any], key: str, value: Any, resolve: bool) -> None:
    if key not in base:
        base[key] = list(value) if isinstance(value, tuple) else copy.deepcopy(value)
        return
    current = base[key]
    if isinstance(current, dict) and isinstance(value, dict):
        apply_overlay(current, value, _resolve=resolve)
    elif isinstance(current, list) and isinstance(value, tuple):
        base[key] = list(value)
    elif isinstance(current, list) and isinstance(value, list):
        current.extend(copy.deepcopy(value))
    elif isinstance(current, dict | list) or isinstance(value, dict | list):
        raise OverlayError(
            f"type mismatch for overlay key {key!r}: the base has a "
            f"{type(current).__qualname__}, the overlay a {type(value).__qualname__}; "
            f"use PUT({key!r}) to replace it"
        )
    else:
        base[key] = value


def apply_overlay(
    base: MutableMapping[str, Any], overlay: Overlay, *, _resolve: bool = True
) -> None:
    """Merges ``overlay`` into ``base`` in place (rules in the module docstring).

    Args:
        base: The native request (or a part of it).
        overlay: The overlay.
        _resolve: Internal: ``False`` keeps operator keys (used by :func:`set_overlay` to
            accumulate overlays).

    Raises:
        OverlayError: For a dict or list merged into a value of another type, or a JOIN
            whose values are not lists of dicts.
    """
    for key, value in overlay.items():
        field = _field(key)
        if _resolve and key.startswith(_DEL):
            _drop_spellings(base, field, keep=None)
            continue
        if _resolve and key.startswith(_PUT):
            _drop_spellings(base, field, keep=None)
            base[field] = copy.deepcopy(value)
            continue
        if key.startswith(_JOIN):
            if _resolve:
                _join(base, key, value, field)
            else:
                _accumulate_join(base, key, value, field)
            continue
        _drop_spellings(base, field, keep=key)  # a later operator for a field wins
        _merge(base, key, value, _resolve)


def set_overlay(target: AppDef | Role, namespace: str, kind: str, overlay: Overlay) -> None:
    """Stores ``overlay`` in ``target.metadata[namespace][kind]``; calls accumulate.

    ``metadata[namespace]`` is marked as holding ``{kind: overlay}`` (the key
    :data:`FORMAT_KEY`), so :func:`get_overlay` never takes it for the older flat form.

    Args:
        target: A role or an app.
        namespace: The backend, e.g. ``kubernetes``.
        kind: The native object, e.g. ``V1Pod``.
        overlay: The overlay (operator keys allowed).

    Raises:
        ValueError: When ``kind`` is :data:`FORMAT_KEY`.
    """
    _check_kind(kind)
    metadata: dict[str, Any] = target.metadata
    ns = metadata.get(namespace)
    if not isinstance(ns, dict):
        ns = metadata[namespace] = {}
    ns[FORMAT_KEY] = True  # nested form: get_overlay never reads it as one flat overlay
    existing = ns.get(kind)
    if not isinstance(existing, dict):
        existing = ns[kind] = {}
    apply_overlay(existing, overlay, _resolve=False)


def _load_file(path: str) -> Overlay:
    path = path.removeprefix("file://")
    with open(os.path.expanduser(path), encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml  # only for overlay files written in YAML

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(
                f"overlay file {path!r} is neither JSON nor plain YAML ({e}); Python tags such "
                "as !!python/tuple are not read: use PUT(key) to replace a list"
            ) from None
    if not isinstance(data, dict):
        raise ValueError(f"overlay file {path!r} must hold a dict, got {type(data).__name__}")
    return data


def get_overlay(
    target: AppDef | Role,
    namespace: str,
    kind: str,
    *,
    flat_fallback: bool = True,
    kinds: tuple[str, ...] = (),
) -> Overlay:
    """The overlay stored for ``namespace``/``kind`` on ``target`` (``{}`` when none).

    ``metadata[namespace]`` may also be the path of a JSON or YAML file holding
    ``{kind: overlay}``. A namespace dict written by :func:`set_overlay` is read as
    ``{kind: overlay}`` only: another kind's overlay is never returned. One written by hand
    without ``kind`` in it is taken as the older flat form (the overlay itself), unless
    ``flat_fallback`` is false or it holds several dicts (one per kind).

    Args:
        target: A role or an app.
        namespace: The backend, e.g. ``kubernetes``.
        kind: The native object, e.g. ``V1Pod``.
        flat_fallback: Whether an unmarked namespace dict without ``kind`` is the overlay.
        kinds: Every kind the backend reads (a backend with several): a dict holding one of
            them is ``{kind: overlay}``, never the flat form.

    Returns:
        The overlay.

    Raises:
        ValueError: When ``kind`` is :data:`FORMAT_KEY`.
    """
    _check_kind(kind)
    ns: Any = target.metadata.get(namespace)
    if isinstance(ns, str):
        ns = _load_file(ns)
    if not isinstance(ns, dict) or not ns:
        return {}
    if isinstance(ns.get(kind), dict):
        return dict(ns[kind])
    if ns.get(FORMAT_KEY) or not flat_fallback or set(ns) & set(kinds):
        return {}
    nested = len(ns) > 1 and all(isinstance(v, dict) for v in ns.values())
    return {} if nested else dict(ns)


def validate_overlay(
    overlay: Overlay,
    *,
    blocklist: list[str] | None = None,
    forbidden_keys: set[str] | None = None,
    overlay_name: str = "overlay",
    suggestion: str = "",
) -> None:
    """Rejects overlay keys a backend takes from the role instead (for backend authors).

    Args:
        overlay: The overlay.
        blocklist: Fields set from the role's attributes (e.g. ``command``, ``env``).
        forbidden_keys: Fields that belong to another kind of overlay.
        overlay_name: The overlay's kind, for the message.
        suggestion: A hint added when ``forbidden_keys`` are found.

    Raises:
        ValueError: Naming the offending keys.
    """
    fields = [_field(k) for k in overlay]
    bad = [f for f in fields if blocklist and f in blocklist]
    if bad:
        keys = ", ".join(f"{overlay_name}.{f}" for f in bad)
        raise ValueError(f"overlay keys {keys} are not allowed: set them on the role instead")
    misplaced = sorted(set(fields) & (forbidden_keys or set()))
    if misplaced:
        raise ValueError(
            f"{overlay_name} overlay has keys of another overlay kind: {misplaced}. "
            f"{suggestion}".strip()
        )


@dataclass(frozen=True)
class OverlaySpec:
    """One overlay kind of a backend, declared once (TorchX's ``OverlaySpec``).

    A backend declares its namespace, kind and the keys users set through the role instead,
    and uses the spec where overlays are written and read::

        V1POD = OverlaySpec("kubernetes", "V1Pod", blocklist=("command", "env"))
        V1POD.set(role, {"spec": {"nodeSelector": {"gpu": "true"}}})
        V1POD.get(role)  # {'spec': {'nodeSelector': {'gpu': 'true'}}}

    Attributes:
        namespace: The backend, e.g. ``kubernetes``.
        kind: The native object, e.g. ``V1Pod``.
        blocklist: Keys that must be set through the role or app instead.
    """

    namespace: str
    kind: str
    blocklist: tuple[str, ...] = ()

    def set(self, target: AppDef | Role, overlay: Overlay) -> None:
        """Stores ``overlay`` (calls accumulate), after checking it against the blocklist.

        Args:
            target: A role or an app.
            overlay: The overlay.

        Raises:
            ValueError: When the overlay has a blocklisted key (nothing is stored).
        """
        validate_overlay(overlay, blocklist=list(self.blocklist), overlay_name=self.kind)
        set_overlay(target, self.namespace, self.kind, overlay)

    def get(self, target: AppDef | Role) -> Overlay:
        """The stored overlay of this kind, checked against the blocklist.

        Only the ``{kind: overlay}`` form is read (``flat_fallback=False``).

        Args:
            target: A role or an app.

        Returns:
            The overlay (``{}`` when none).

        Raises:
            ValueError: When the stored overlay has a blocklisted key.
        """
        overlay = get_overlay(target, self.namespace, self.kind, flat_fallback=False)
        validate_overlay(overlay, blocklist=list(self.blocklist), overlay_name=self.kind)
        return overlay
