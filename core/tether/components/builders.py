"""TorchX's ``torchx.specs.builders`` entry points for components: ``materialize_appdef``,
``parse_args`` and ``component_args_from_str``, with ``cmpnt_defaults`` and ``config``.

They take a component function and its command-line arguments as TorchX's do:

* ``cmpnt_defaults`` (strings, as read from ``[component:<name>]`` of ``.tetherconfig``)
  win over the function's defaults and lose to the command line; a key that is not a
  parameter is ignored (with a warning naming it);
* ``config`` (Python values, as read from a config file) wins over both the defaults and
  the command line; a parameter it gives is not required on the command line; a key that
  is not a parameter is ignored;
* a missing, unknown or malformed argument prints the usage and the error to stderr and
  exits with status 2 (``sys.exit(2)``, as argparse); a component's own ``ValueError``
  propagates unchanged.

tether's own API, which raises :class:`~tether.components.args.ComponentArgError` instead,
is :func:`tether.components.args.materialize`.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from tether.components.args import ComponentArgError, _config_defaults, _spec
from tether.components.args import parse_args as _parse_args
from tether.specs import AppDef

logger = logging.getLogger(__name__)


class ComponentArgs(NamedTuple):
    """A component function's arguments, typed, as TorchX's ``ComponentArgs``.

    Attributes:
        positional_args: The parameters before ``*args`` (positional or keyword), by name.
        var_args: The ``*args`` values.
        kwargs: The keyword-only parameters, by name.
    """

    positional_args: dict[str, Any]
    var_args: list[Any]
    kwargs: dict[str, Any]


def _exit(fn: Callable[..., Any], e: ComponentArgError) -> NoReturn:
    usage = e.usage.rstrip()
    sys.stderr.write(f"{usage}\n{getattr(fn, '__name__', 'component')}: error: {e}\n")
    sys.exit(2)
    raise e  # only reached when sys.exit is replaced (a test's mock)


def _known(fn: Callable[..., Any], values: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """``values`` without the keys that name no parameter of ``fn`` (each one logged)."""
    if not values:
        return {}
    names = {p.name for p in _spec(fn, None).params}
    names |= {f.lstrip("-") for p in _spec(fn, None).params for f in p.flags}
    unknown = [k for k in values if k.lstrip("-") not in names]
    for key in unknown:
        logger.warning("%s %r is not a parameter of %s: ignored", what, key,
                       getattr(fn, "__name__", fn))
    return {k: v for k, v in values.items() if k not in unknown}


def _arguments(
    cmpnt_fn: Callable[..., Any],
    cmpnt_args: Sequence[str],
    cmpnt_defaults: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Every parameter's value by name (``*args`` as a list): config > argv > defaults."""
    defaults = _known(cmpnt_fn, cmpnt_defaults, "component default")
    names = {p.name for p in _spec(cmpnt_fn, None).params}
    overrides = {k: v for k, v in (config or {}).items() if k in names}
    try:
        # config values are defaults here (so they are not required), then win below
        positional, keywords = _parse_args(cmpnt_fn, list(cmpnt_args),
                                           {**defaults, **overrides})
        converted = _config_defaults(_spec(cmpnt_fn, None), overrides,
                                     getattr(cmpnt_fn, "__name__", "component"))
    except ComponentArgError as e:
        _exit(cmpnt_fn, e)
    sig = inspect.signature(cmpnt_fn)
    bound = sig.bind(*positional, **keywords)
    bound.apply_defaults()
    values = dict(bound.arguments)
    for name, param in sig.parameters.items():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            values[name] = list(values.get(name, ()))
    values.update(converted)
    return values


def component_args_from_str(
    cmpnt_fn: Callable[..., AppDef],
    cmpnt_args: Sequence[str],
    cmpnt_args_defaults: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> ComponentArgs:
    """A component's command-line arguments parsed and typed, split as the call takes them.

    Args:
        cmpnt_fn: The component function.
        cmpnt_args: Its arguments: ``["--foo", "x", "a1"]`` or ``["--foo=x", "a1"]``.
        cmpnt_args_defaults: Defaults by parameter name, as strings.
        config: Values by parameter name that win over the arguments and the defaults.

    Returns:
        The parameters before ``*args`` by name, the ``*args`` values and the keyword-only
        parameters by name.

    Raises:
        SystemExit: (code 2, usage on stderr) For a missing, unknown or malformed argument.
    """
    values = _arguments(cmpnt_fn, cmpnt_args, cmpnt_args_defaults, config)
    out = ComponentArgs({}, [], {})
    for name, param in inspect.signature(cmpnt_fn).parameters.items():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            out.var_args.extend(values[name])
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            out.kwargs[name] = values[name]
        else:
            out.positional_args[name] = values[name]
    return out


def materialize_appdef(
    cmpnt_fn: Callable[..., AppDef],
    cmpnt_args: Sequence[str],
    cmpnt_defaults: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> AppDef:
    """Calls a component with command-line arguments, as TorchX's ``materialize_appdef``.

    Args:
        cmpnt_fn: The component function.
        cmpnt_args: Its arguments, e.g. ``["--msg", "hi"]``.
        cmpnt_defaults: Defaults by parameter name, as strings (as in ``.tetherconfig``'s
            ``[component:<name>]``); they win over the function's own defaults.
        config: Values by parameter name that win over the arguments and the defaults.

    Returns:
        The AppDef.

    Raises:
        SystemExit: (code 2, usage on stderr) For a missing, unknown or malformed argument.
        TypeError: When the component does not return an AppDef.
    """
    call = component_args_from_str(cmpnt_fn, cmpnt_args, cmpnt_defaults, config)
    app = cmpnt_fn(*call.positional_args.values(), *call.var_args, **call.kwargs)
    if not isinstance(app, AppDef):
        raise TypeError(f"Expected a component that returns `AppDef`, but got `{type(app)}`")
    return app


def parse_args(
    cmpnt_fn: Callable[..., AppDef],
    cmpnt_args: Sequence[str],
    cmpnt_defaults: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> argparse.Namespace:
    """The component's arguments as a namespace by parameter name (TorchX's ``parse_args``).

    Args:
        cmpnt_fn: The component function.
        cmpnt_args: Its arguments.
        cmpnt_defaults: Defaults by parameter name, as strings.
        config: Values by parameter name that win over the arguments and the defaults.

    Returns:
        Every parameter's value, typed (``*args`` as a list).

    Raises:
        SystemExit: (code 2, usage on stderr) For a missing, unknown or malformed argument.
    """
    return argparse.Namespace(**_arguments(cmpnt_fn, cmpnt_args, cmpnt_defaults, config))
