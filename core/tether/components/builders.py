"""TorchX's ``torchx.specs.builders`` entry points for components: ``materialize_appdef`` and
``parse_args`` with ``cmpnt_defaults``.

They take a component function and its command-line arguments as TorchX's do, and fail as
TorchX's argparse-based parser does: a missing, unknown or malformed argument prints the
usage and the error to stderr and raises ``SystemExit(2)``; a component's own ``ValueError``
propagates unchanged. tether's own API, which raises
:class:`~tether.components.args.ComponentArgError` instead, is
:func:`tether.components.args.materialize`.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from tether.components.args import ComponentArgError, materialize
from tether.components.args import parse_args as _parse_args
from tether.specs import AppDef


def _exit(fn: Callable[..., Any], e: ComponentArgError) -> NoReturn:
    if e.__cause__ is not None:  # the component rejected the values itself
        raise e.__cause__
    usage = e.usage.rstrip()
    sys.stderr.write(f"{usage}\n{getattr(fn, '__name__', 'component')}: error: {e}\n")
    raise SystemExit(2) from e


def materialize_appdef(
    cmpnt_fn: Callable[..., AppDef],
    cmpnt_args: Sequence[str],
    cmpnt_defaults: Mapping[str, str] | None = None,
) -> AppDef:
    """Calls a component with command-line arguments, as TorchX's ``materialize_appdef``.

    Args:
        cmpnt_fn: The component function.
        cmpnt_args: Its arguments, e.g. ``["--msg", "hi"]``.
        cmpnt_defaults: Defaults by parameter name, as strings (as in ``.tetherconfig``'s
            ``[component:<name>]``); they win over the function's own defaults.

    Returns:
        The AppDef.

    Raises:
        SystemExit: (code 2, usage on stderr) For a missing, unknown or malformed argument.
    """
    try:
        return materialize(cmpnt_fn, list(cmpnt_args), cmpnt_defaults)
    except ComponentArgError as e:
        _exit(cmpnt_fn, e)


def parse_args(
    cmpnt_fn: Callable[..., AppDef],
    cmpnt_args: Sequence[str],
    cmpnt_defaults: Mapping[str, str] | None = None,
) -> argparse.Namespace:
    """The component's arguments as a namespace by parameter name (TorchX's ``parse_args``).

    Args:
        cmpnt_fn: The component function.
        cmpnt_args: Its arguments.
        cmpnt_defaults: Defaults by parameter name, as strings.

    Returns:
        Every parameter's value, typed (``*args`` as a list).

    Raises:
        SystemExit: (code 2, usage on stderr) For a missing, unknown or malformed argument.
    """
    try:
        positional, keywords = _parse_args(cmpnt_fn, list(cmpnt_args), cmpnt_defaults)
    except ComponentArgError as e:
        _exit(cmpnt_fn, e)
    sig = inspect.signature(cmpnt_fn)
    bound = sig.bind(*positional, **keywords)
    bound.apply_defaults()
    values = {
        name: list(value) if sig.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL
        else value
        for name, value in bound.arguments.items()
    }
    return argparse.Namespace(**values)
