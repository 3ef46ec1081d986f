"""Components as adapters take them: by name or as a function, to an AppDef.

An orchestrator's task names its component the way the CLI does (``dist.ddp``,
``file.py:fn``, ``pkg.module:fn``) or passes the function. :func:`resolve_component` finds it,
:func:`component_ref` gives a name another process can find it by, :func:`component_params`
lists its typed parameters (what an orchestrator exposes as task inputs) and
:func:`materialize` builds its AppDef with the task's image and env overrides.

Only the public API of ``tether.components`` and ``tether.specs`` is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.specs import AppDef


def resolve_component(component: str | Callable[..., AppDef]) -> tuple[str, Callable[..., AppDef]]:
    """Finds a component given by name (as the CLI takes it) or as a function.

    Args:
        component: ``dist.ddp``, ``file.py:fn``, ``pkg.module:fn`` or the function itself.

    Returns:
        Its display name and function.
    """
    from tether.components.finder import get_component

    if callable(component):
        name = f"{component.__module__}:{component.__qualname__}"
        return name, component
    info = get_component(component)
    return info.name, info.fn


def component_ref(component: str | Callable[..., AppDef]) -> str:
    """A name another process can find the component by (for steps that run elsewhere).

    Args:
        component: A component name, or a function defined at the top level of an importable
            module.

    Returns:
        The name itself, or ``pkg.module:fn`` for a function.

    Raises:
        ValueError: For a function another process cannot import (defined in ``__main__``,
            inside another function, or a lambda).
    """
    if not callable(component):
        return component
    module = getattr(component, "__module__", None) or ""
    qualname = getattr(component, "__qualname__", "") or ""
    if module == "__main__" or not module or "<" in qualname or "." in qualname:
        raise ValueError(
            f"component {qualname or component!r} (module {module or '?'!r}) cannot be imported "
            "by another process: define it at the top level of an importable module, or pass "
            "its name ('pkg.module:fn' or 'path/to/file.py:fn')"
        )
    return f"{module}:{qualname}"


def component_params(component: str | Callable[..., AppDef]) -> list[Any]:
    """The typed parameters of a component (what an orchestrator exposes as task inputs).

    Args:
        component: The component (name or function).

    Returns:
        One :class:`tether.components.params.Param` per parameter, in signature order.

    Raises:
        ValueError: When the function is not a valid component (the message lists why).
    """
    from tether.components.params import inspect_component

    name, fn = resolve_component(component)
    spec = inspect_component(fn)
    if spec.errors:
        raise ValueError(f"{name} is not a valid component: " + "; ".join(spec.errors))
    return list(spec.params)


def materialize(
    component: str | Callable[..., AppDef],
    component_args: list[str] | Mapping[str, Any] | None = None,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] | None = None,
) -> AppDef:
    """Builds the AppDef of a component, with optional image and env overrides.

    Args:
        component: The component (name or function).
        component_args: CLI-style arguments or keyword arguments.
        image: Replaces every role's image.
        env: Added to (and overriding) every role's env.
        defaults: Default arguments (e.g. ``[component:<name>]`` from ``.tetherconfig``).

    Returns:
        The AppDef.
    """
    from tether.components.args import materialize as _materialize

    _, fn = resolve_component(component)
    app = _materialize(fn, component_args if component_args is not None else {}, defaults or {})
    for role in app.roles:
        if image:
            role.image = image
        if env:
            role.env.update(env)
    return app
