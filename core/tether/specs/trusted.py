"""Specs rebuilt from data tether wrote and checked itself, without checking them again.

The constructors of :class:`~tether.specs.Role` and :class:`~tether.specs.AppDef` check
every field, which is right for anything a user builds. Tether also rebuilds apps from its
own records (a ``local_cwd`` record is read back at every ``describe``); checking the same
app again at each read only costs time. :func:`unchecked_role` and :func:`unchecked_app`
build them as the constructors would, minus the checks. Nothing else should call them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tether.errors import SpecTypeError
from tether.specs.app import AppDef, Role

_FIELD_SPECS: dict[type, tuple[tuple[str, Any, Any], ...]] = {}


def _unchecked(cls: type[Any], values: dict[str, Any]) -> Any:
    """An instance of dataclass ``cls`` with ``values`` (defaults for the rest), its
    ``__post_init__`` (the checks) not run."""
    spec = _FIELD_SPECS.get(cls)
    if spec is None:
        spec = tuple((f.name, f.default, f.default_factory) for f in dataclasses.fields(cls))
        _FIELD_SPECS[cls] = spec
    unknown = set(values).difference(name for name, _, _ in spec)
    if unknown:
        raise SpecTypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    obj = object.__new__(cls)
    attrs = obj.__dict__
    for name, default, factory in spec:
        if name in values:
            attrs[name] = values[name]
        elif default is not dataclasses.MISSING:
            attrs[name] = default
        elif factory is not dataclasses.MISSING:
            attrs[name] = factory()
        else:
            raise SpecTypeError(f"{cls.__name__} needs field {name!r}")
    return obj


def unchecked_role(**values: Any) -> Role:
    """A :class:`Role` built without its constructor's checks, for tether's own code only.

    For a role tether rebuilds from data it wrote and checked itself (a ``local_cwd``
    record read back): the values must be what the constructor would keep (``args`` a list,
    ``retry_policy`` a :class:`~tether.specs.RetryPolicy`). Anything else builds a role
    with ``Role(...)``, which checks every field.

    Args:
        **values: The fields (the others take their defaults).

    Returns:
        The role.

    Raises:
        SpecTypeError: For a name that is no field of Role, or a missing ``name``.
    """
    role: Role = _unchecked(Role, values)
    return role


def unchecked_app(**values: Any) -> AppDef:
    """An :class:`AppDef` built without its constructor's checks (see :func:`unchecked_role`).

    Args:
        **values: The fields (the others take their defaults); ``roles`` a list of Role.

    Returns:
        The app.

    Raises:
        SpecTypeError: For a name that is no field of AppDef, or a missing ``name``.
    """
    app: AppDef = _unchecked(AppDef, values)
    return app
