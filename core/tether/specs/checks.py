"""The one validation layer of specs: the field checks every model check is built from.

:class:`~tether.specs.Resource`, :class:`~tether.specs.Role` and
:class:`~tether.specs.AppDef` run their checks (:func:`tether.specs.resources.check_resource`,
:func:`tether.specs.app.check_role`, :func:`tether.specs.app.check_app`, made of the checks
here) when constructed, raising the wrong-type problems only; :func:`tether.specs.validate`
runs them all on the whole app before anything is submitted (so, as in TorchX,
``Role(num_replicas=0)`` is legal until the app is submitted, and fields may have been
changed since). Each check returns :class:`Problem` s naming the field, the value and what
is allowed; :func:`raise_problems` turns them into a
:class:`~tether.errors.SpecTypeError` (a wrong type) or a
:class:`~tether.errors.SpecError`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import SpecError, SpecTypeError

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


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 80 characters for messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_name(value: Any) -> str:
    """The name of ``value``'s type, for messages."""
    return type(value).__name__


def got(value: Any) -> str:
    """What a message says a value is: its type and (shortened) repr."""
    return f"{type_name(value)} {short_repr(value)}"


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
        return [Problem(f"{field} must be a str, got {got(value)}", True)]
    if "\0" in value:
        return [Problem(f"{field} = {short_repr(value)} contains a NUL byte, which no OS accepts")]
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
        return [Problem(f"{field} must be {allowed}, got {got(value)}", True)]
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
        return [Problem(f"{field} keys must be str, got {got(name)}", True)]
    if not _ENV_NAME.match(name):
        return [
            Problem(
                f"{field} key {short_repr(name)} is not an environment variable name "
                "(non-empty, without '=' or NUL bytes)"
            )
        ]
    return []


def check_mapping(field: str, value: Any) -> list[Problem]:
    """A dict (any mapping).

    Args:
        field: The field's name in messages.
        value: The value.

    Returns:
        The problems found.
    """
    if not isinstance(value, Mapping):
        return [Problem(f"{field} must be a dict, got {got(value)}", True)]
    return []


def check_retry_policy(field: str, value: Any) -> list[Problem]:
    """A :class:`~tether.specs.RetryPolicy` (or the string value of one).

    Args:
        field: The field's name in messages.
        value: The value.

    Returns:
        The problems found.
    """
    from tether.specs.states import RetryPolicy

    allowed = [p.value for p in RetryPolicy]
    if isinstance(value, RetryPolicy):
        return []
    if isinstance(value, str):
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(value.upper(), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if value not in allowed:
            return [Problem(f"{field} = {short_repr(value)} is not one of {allowed}{hint}")]
        return []
    return [Problem(f"{field} must be one of {allowed}, got {got(value)}", True)]


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


def raise_type_problems(problems: Iterable[Problem], what: str) -> None:
    """Raises the wrong-type problems only (what a spec's constructor checks).

    A value of the right type that is out of range (``Role(num_replicas=0)``) is legal until
    the app is submitted, as in TorchX: :func:`tether.specs.validate` (run by
    ``submit_dryrun``) reports it. A value of the wrong type is reported at once.

    Args:
        problems: The problems.
        what: What was checked, starting the message.

    Raises:
        SpecTypeError: Listing the wrong-type problems, when there are any.
    """
    raise_problems([p for p in problems if p.is_type], what)
