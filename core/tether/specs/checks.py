"""The one validation layer of specs: type and range checks of every public field.

:class:`~tether.specs.Resource`, :class:`~tether.specs.Role` and
:class:`~tether.specs.AppDef` run these checks when constructed; :func:`tether.specs.validate`
runs them again on the whole app before anything is submitted (fields may have been changed
since). Each check returns :class:`Problem` s naming the field, the value and what is allowed;
:func:`raise_problems` turns them into a :class:`~tether.specs.errors.SpecTypeError` (a wrong
type) or a :class:`~tether.specs.errors.SpecError`.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.specs.errors import SpecError, SpecTypeError

MAX_REPLICAS_ENV = "TETHER_MAX_REPLICAS"
"""Environment variable raising (or lowering) the replica bound of a role."""
DEFAULT_MAX_REPLICAS = 10_000
"""The most replicas a role may have unless ``$TETHER_MAX_REPLICAS`` says otherwise."""

_ENV_NAME = re.compile(r"^[^=\0]+$")


@dataclass(frozen=True)
class Problem:
    """One invalid field.

    Attributes:
        msg: What is wrong: the field, the value and what is allowed.
        is_type: Whether the value has the wrong type (rather than a bad value).
    """

    msg: str
    is_type: bool = False


def max_replicas() -> int:
    """The replica bound: ``$TETHER_MAX_REPLICAS`` or :data:`DEFAULT_MAX_REPLICAS`.

    Returns:
        The bound.

    Raises:
        SpecError: When the variable is not a positive integer.
    """
    raw = os.environ.get(MAX_REPLICAS_ENV)
    if not raw:
        return DEFAULT_MAX_REPLICAS
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise SpecError(f"${MAX_REPLICAS_ENV}={raw!r} is not a positive integer")
    return n


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _tname(value: Any) -> str:
    return type(value).__name__


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int (bools excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_str(field: str, value: Any, *, empty_ok: bool = True) -> list[Problem]:
    """A string without NUL bytes (non-empty unless ``empty_ok``).

    Args:
        field: The field's name in messages.
        value: The value.
        empty_ok: Whether ``""`` is allowed.

    Returns:
        The problems found.
    """
    if not isinstance(value, str):
        return [Problem(f"{field} must be a str, got {_tname(value)} {_short(value)}", True)]
    if "\0" in value:
        return [Problem(f"{field} = {_short(value)} contains a NUL byte, which no OS accepts")]
    if not empty_ok and not value.strip():
        return [Problem(f"{field} is empty; give a non-empty string")]
    return []


def check_number(
    field: str, value: Any, *, integral: bool, default_ok: bool = True
) -> list[Problem]:
    """A finite number >= 0 (or -1, "the scheduler's default", when ``default_ok``).

    Args:
        field: The field's name in messages.
        value: The value.
        integral: Whether only whole numbers are allowed (a float like ``2.0`` is accepted).
        default_ok: Whether -1 is allowed.

    Returns:
        The problems found.
    """
    kind = "an int" if integral else "a number"
    allowed = f"{kind} >= 0" + (" (or -1 for the scheduler's default)" if default_ok else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [Problem(f"{field} must be {allowed}, got {_tname(value)} {_short(value)}", True)]
    if not math.isfinite(value):
        return [Problem(f"{field} = {value!r} is not allowed: must be {allowed}")]
    if integral and value != int(value):
        return [Problem(f"{field} = {value!r} is not a whole number: must be {allowed}")]
    if value < 0 and not (default_ok and value == -1):
        return [Problem(f"{field} = {value!r} is negative: must be {allowed}")]
    return []


def check_env_name(field: str, name: Any) -> list[Problem]:
    """An environment variable name: a non-empty str without ``=`` or NUL.

    Args:
        field: The mapping's name in messages (e.g. ``env``).
        name: The key.

    Returns:
        The problems found.
    """
    if not isinstance(name, str):
        return [Problem(f"{field} keys must be str, got {_tname(name)} {_short(name)}", True)]
    if not _ENV_NAME.match(name):
        return [
            Problem(
                f"{field} key {_short(name)} is not an environment variable name "
                "(non-empty, without '=' or NUL bytes)"
            )
        ]
    return []


def _check_mapping(field: str, value: Any) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem(f"{field} must be a dict, got {_tname(value)} {_short(value)}", True)]
    return []


def check_resource(res: Any, where: str = "resource") -> list[Problem]:
    """Checks a :class:`~tether.specs.Resource`.

    Args:
        res: The resource.
        where: Prefix naming it in messages.

    Returns:
        The problems found.
    """
    from tether.specs.resources import Resource

    if not isinstance(res, Resource):
        return [Problem(f"{where} must be a Resource, got {_tname(res)} {_short(res)}", True)]
    out = check_number(f"{where}.cpu", res.cpu, integral=False)
    out += check_number(f"{where}.gpu", res.gpu, integral=True)
    out += check_number(f"{where}.memMB", res.memMB, integral=True)
    for fld in ("capabilities", "devices", "tags"):
        out += _check_mapping(f"{where}.{fld}", getattr(res, fld))
    if not out:
        for dev, count in res.devices.items():
            out += check_str(f"{where}.devices key", dev, empty_ok=False)
            out += check_number(
                f"{where}.devices[{_short(dev)}]", count, integral=True, default_ok=False
            )
        for k, v in res.tags.items():
            out += check_str(f"{where}.tags key", k) + check_str(f"{where}.tags[{k!r}]", v)
        for k in res.capabilities:
            out += check_str(f"{where}.capabilities key", k)
    return out


def check_retry_policy(field: str, value: Any) -> list[Problem]:
    """A :class:`~tether.specs.RetryPolicy` (or the string value of one).

    Args:
        field: The field's name in messages.
        value: The value.

    Returns:
        The problems found.
    """
    from tether.specs.status import RetryPolicy

    allowed = [p.value for p in RetryPolicy]
    if isinstance(value, RetryPolicy):
        return []
    if isinstance(value, str):
        close = difflib.get_close_matches(value.upper(), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if value not in allowed:
            return [Problem(f"{field} = {_short(value)} is not one of {allowed}{hint}")]
        return []
    return [Problem(f"{field} must be one of {allowed}, got {_tname(value)} {_short(value)}", True)]


def check_role(role: Any) -> list[Problem]:
    """Checks the fields of a :class:`~tether.specs.Role` (types, ranges, names, NUL bytes).

    An empty entrypoint is not reported here (a role may be completed after construction);
    :func:`tether.specs.validate` reports it.

    Args:
        role: The role.

    Returns:
        The problems found, each naming the role and the field.
    """
    from tether.specs.app import Role
    from tether.specs.mounts import BindMount, DeviceMount, VolumeMount
    from tether.specs.secrets import SecretRef

    if not isinstance(role, Role):
        return [Problem(f"a role must be a Role, got {_tname(role)} {_short(role)}", True)]
    name_problems = check_str("role name", role.name, empty_ok=False)
    if name_problems:
        return name_problems
    where = f"role {role.name!r}"
    out = check_str(f"{where}: image", role.image)
    out += check_str(f"{where}: entrypoint", role.entrypoint)
    if not isinstance(role.args, list):
        out.append(Problem(f"{where}: args must be a list of str, got {_tname(role.args)}", True))
    else:
        for i, a in enumerate(role.args):
            out += check_str(f"{where}: args[{i}]", a)
    for fld in ("env", "secrets", "port_map", "metadata"):
        out += _check_mapping(f"{where}: {fld}", getattr(role, fld))
    if isinstance(role.env, Mapping):
        for k, v in role.env.items():
            out += check_env_name(f"{where}: env", k)
            out += check_str(f"{where}: env[{_short(k)}]", v)
    if isinstance(role.secrets, Mapping):
        for k, ref in role.secrets.items():
            out += check_env_name(f"{where}: secrets", k)
            if not isinstance(ref, SecretRef):
                out.append(
                    Problem(
                        f"{where}: secrets[{_short(k)}] must be a SecretRef, got "
                        f"{_tname(ref)} {_short(ref)}",
                        True,
                    )
                )
            else:
                out += check_str(f"{where}: secrets[{_short(k)}].name", ref.name, empty_ok=False)
                out += check_str(f"{where}: secrets[{_short(k)}].key", ref.key)
            if isinstance(role.env, Mapping) and k in role.env:
                out.append(Problem(f"{where}: {k!r} is set in both env and secrets; keep one"))
    bound = max_replicas()
    if not is_int(role.num_replicas):
        out.append(
            Problem(
                f"{where}: num_replicas must be an int in 1..{bound}, got "
                f"{_tname(role.num_replicas)} {_short(role.num_replicas)}",
                True,
            )
        )
    elif not 1 <= role.num_replicas <= bound:
        out.append(
            Problem(
                f"{where}: num_replicas = {role.num_replicas} is out of range 1..{bound} "
                f"(set ${MAX_REPLICAS_ENV} to allow more)"
            )
        )
    if role.min_replicas is not None:
        if not is_int(role.min_replicas):
            out.append(
                Problem(
                    f"{where}: min_replicas must be an int or None, got "
                    f"{_tname(role.min_replicas)} {_short(role.min_replicas)}",
                    True,
                )
            )
        elif role.min_replicas < 0 or (
            is_int(role.num_replicas) and role.min_replicas > role.num_replicas
        ):
            out.append(
                Problem(
                    f"{where}: min_replicas = {role.min_replicas} must be in "
                    f"0..num_replicas ({role.num_replicas})"
                )
            )
    if not is_int(role.max_retries):
        out.append(
            Problem(
                f"{where}: max_retries must be an int >= 0, got "
                f"{_tname(role.max_retries)} {_short(role.max_retries)}",
                True,
            )
        )
    elif role.max_retries < 0:
        out.append(Problem(f"{where}: max_retries = {role.max_retries} must be >= 0"))
    out += check_retry_policy(f"{where}: retry_policy", role.retry_policy)
    out += check_resource(role.resource, f"{where}: resource")
    if isinstance(role.port_map, Mapping):
        for pname, port in role.port_map.items():
            out += check_str(f"{where}: port_map key", pname, empty_ok=False)
            if not is_int(port) or not 0 < port < 65536:
                out.append(
                    Problem(
                        f"{where}: port_map[{_short(pname)}] = {_short(port)} is "
                        "not a port (an int in 1..65535)",
                        not is_int(port),
                    )
                )
    if not isinstance(role.mounts, list):
        out.append(Problem(f"{where}: mounts must be a list, got {_tname(role.mounts)}", True))
    else:
        for m in role.mounts:
            if not isinstance(m, (BindMount, VolumeMount, DeviceMount)):
                out.append(
                    Problem(
                        f"{where}: mount {_short(m)} is not a BindMount, "
                        "VolumeMount or DeviceMount",
                        True,
                    )
                )
    return out


def check_app(app: Any) -> list[Problem]:
    """Checks an :class:`~tether.specs.AppDef` and each of its roles.

    Args:
        app: The app.

    Returns:
        The problems found.
    """
    from tether.specs.app import AppDef

    if not isinstance(app, AppDef):
        return [Problem(f"app must be an AppDef, got {_tname(app)} {_short(app)}", True)]
    out = check_str("app name", app.name, empty_ok=False)
    out += _check_mapping("app metadata", app.metadata)
    if not isinstance(app.roles, list):
        out.append(Problem(f"app roles must be a list of Role, got {_tname(app.roles)}", True))
        return out
    for role in app.roles:
        out += check_role(role)
    return out


def raise_problems(problems: Iterable[Problem], what: str) -> None:
    """Raises the problems as one error (no-op when there are none).

    Args:
        problems: The problems.
        what: What was checked (``"Role"``, ``"AppDef"``...), starting the message.

    Raises:
        SpecTypeError: When any problem is a wrong type.
        SpecError: Otherwise.
    """
    probs = list(problems)
    if not probs:
        return
    text = probs[0].msg if len(probs) == 1 else "\n  - " + "\n  - ".join(p.msg for p in probs)
    msg = f"invalid {what}: {text}"
    if any(p.is_type for p in probs):
        raise SpecTypeError(msg)
    raise SpecError(msg)
