"""Components used by the tests of the argument parser and the finder."""

from __future__ import annotations

from typing import Annotated

from tether.specs import AppDef, Role


def _app(**values: object) -> AppDef:
    """An app whose single role's args record the values it was called with."""
    return AppDef(
        name="sample",
        roles=[Role(name="r", entrypoint="echo",
                    args=[f"{k}={v!r}" for k, v in values.items()])],
        metadata={"values": repr(values)},
    )


def typed(
    s: str,
    i: int = 1,
    f: float = 0.5,
    b: bool = False,
    o: int | None = None,
    items: list[str] | None = None,
    nums: list[int] | None = None,
    env: dict[str, str] | None = None,
    config_name: Annotated[str, "-cn"] = "default",
    max_retries: int = 0,
) -> AppDef:
    """A component with one parameter of each supported type.

    Args:
        s: A required string.
        i: An integer.
        f: A float.
        b: A flag.
        o: An optional integer.
        items: A list of strings.
        nums: A list of integers.
        env: A dict.
        config_name: Has a short alias -cn.
        max_retries: Has a dashed alias.

    Returns:
        The app.
    """
    return _app(s=s, i=i, f=f, b=b, o=o, items=items, nums=nums, env=env,
                config_name=config_name, max_retries=max_retries)


def with_varargs(*args: str, flag: bool = False, name: str = "x") -> AppDef:
    """A component with positional arguments.

    Args:
        args: Passed through.
        flag: A flag.
        name: A name.

    Returns:
        The app.
    """
    return _app(args=list(args), flag=flag, name=name)


def positional_then_varargs(first: str, *rest: str) -> AppDef:
    """A parameter before *rest must be passed positionally.

    Args:
        first: The first value.
        rest: The others.

    Returns:
        The app.
    """
    return _app(first=first, rest=list(rest))


def rejects(x: int = 0) -> AppDef:
    """Raises ValueError for negative x.

    Args:
        x: A number.

    Returns:
        The app.
    """
    if x < 0:
        raise ValueError(f"x must be >= 0, got {x}")
    return _app(x=x)


def not_an_app(x: int = 0) -> AppDef:
    """Claims to return an AppDef but does not."""
    return "oops"  # type: ignore[return-value]


def helper(x: int) -> int:
    """Not a component (returns int)."""
    return x
