"""Component arguments: a signature plus Google-style docstring become a command line.

Every parameter is an option: ``--name VALUE`` (``-x VALUE`` too for one-letter names, and
``--max-retries`` for ``max_retries``); ``Annotated[str, "-cn"]`` adds aliases. Values:

* ``bool``: ``--flag`` (true), ``--flag true|false``, ``--flag=false``, ``--no-flag``;
* ``list[X]``: ``--opt a,b,c``; repeating the option appends;
* ``dict[K, V]``: ``--env A=1,B=2``; ``dict[K, list[X]]``: ``--m a=1;2,b=3``; repeating the
  option merges (the grammar, TorchX's, is in :mod:`tether.components.literals`);
* ``*args``: the first token that is not a known option and all after it, or all after ``--``.

Defaults come from the signature, overridden by ``[component:<name>]`` of ``.tetherconfig``
(the ``defaults`` argument), overridden by what the user passes.

Use :func:`materialize` to call a component with CLI-style or keyword arguments.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.components.literals import parse_dict, parse_list, parse_value_list
from tether.components.params import ComponentSpec, Kind, Param, inspect_component
from tether.errors import SpecError

if TYPE_CHECKING:
    from tether.specs import AppDef

_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}


class ComponentArgError(SpecError):
    """A wrong or missing component argument.

    Attributes:
        usage: The component's usage line(s), to print with the error.
    """

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class InvalidComponentError(SpecError):
    """The function cannot be used as a component (see :mod:`tether.components.validate`)."""


def _prog(fn: Callable[..., Any], prog: str | None) -> str:
    return prog or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"


def _spec(fn: Callable[..., Any], prog: str | None) -> ComponentSpec:
    spec = inspect_component(fn)
    if spec.errors:
        raise InvalidComponentError(
            f"{_prog(fn, prog)} is not a valid component: " + "; ".join(spec.errors)
        )
    return spec


def _default_text(p: Param) -> str:
    if p.default is inspect.Parameter.empty:
        return ""
    d = p.default
    if d is None:
        return ""
    if p.container == "list":
        return ",".join(str(v) for v in d)
    if p.container == "dict" and p.value_list:
        return ",".join(f"{k}={';'.join(str(x) for x in v)}" for k, v in d.items())
    if p.container == "dict":
        return ",".join(f"{k}={v}" for k, v in d.items())
    return str(d).lower() if p.base is bool else str(d)


def build_parser(
    fn: Callable[..., Any], prog: str | None = None, defaults: Mapping[str, Any] | None = None
) -> argparse.ArgumentParser:
    """An argparse parser that documents the component (for ``--help`` and usage lines).

    Parsing itself is done by :func:`parse_args`; this parser renders the help.

    Args:
        fn: The component.
        prog: Name shown in the usage (e.g. ``tether run dist.ddp``).
        defaults: Defaults from ``.tetherconfig`` (shown instead of the signature's).

    Returns:
        The parser.

    Raises:
        InvalidComponentError: When ``fn`` is not a valid component.
    """
    spec = _spec(fn, prog)
    cfg = _config_defaults(spec, defaults or {}, _prog(fn, prog))
    parser = argparse.ArgumentParser(
        prog=_prog(fn, prog),
        description=spec.description,
        add_help=False,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Values: bool options take --flag, --flag=false or --no-flag; lists a,b,c; "
            "dicts K=V,K2=V2 (lists as values: K=a;b,K2=c). "
            + (
                "Arguments after the named options (or after --) go to the component's "
                "positional arguments."
                if any(p.kind == Kind.VARARGS for p in spec.params)
                else ""
            )
        ),
    )
    parser.add_argument("--help", action="help", help="show this help message and exit")
    for p in spec.params:
        help_text = p.help or ""
        if p.kind == Kind.VARARGS:
            parser.add_argument(p.name, nargs="*", metavar=p.name, help=help_text)
            continue
        if p.name in cfg:
            shown = _default_text_value(p, cfg[p.name])
            help_text += f" (default from .tetherconfig: {shown})"
        elif p.required:
            help_text += " (required)"
        else:
            shown = _default_text(p)
            if shown:
                help_text += f" (default: {shown})"
        parser.add_argument(
            *p.flags,
            dest=p.name,
            metavar=_metavar(p),
            help=help_text.strip() or None,
            required=p.required and p.name not in cfg,
        )
    return parser


def _metavar(p: Param) -> str:
    if p.container == "list":
        return f"{p.name.upper()}[,...]"
    if p.container == "dict":
        return "K=V[,...]"
    if p.base is bool:
        return "[true|false]"
    return p.name.upper()


def _default_text_value(p: Param, value: Any) -> str:
    tmp = Param(name=p.name, kind=p.kind, base=p.base, container=p.container,
                value_list=p.value_list, default=value)
    return _default_text(tmp) or repr(value)


def component_help(
    fn: Callable[..., Any], prog: str | None = None, defaults: Mapping[str, Any] | None = None
) -> str:
    """The full help text of a component.

    Args:
        fn: The component.
        prog: Name shown in the usage.
        defaults: Defaults from ``.tetherconfig``.

    Returns:
        The text.
    """
    return build_parser(fn, prog, defaults).format_help()


def component_usage(fn: Callable[..., Any], prog: str | None = None) -> str:
    """The usage line(s) of a component (empty when it is not a valid component)."""
    try:
        return build_parser(fn, prog).format_usage()
    except InvalidComponentError:
        return ""


def _parse_bool(text: str) -> bool | None:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def _scalar(p: Param, text: str, base: type, what: str) -> Any:
    if base is str:
        return text
    if base is bool:
        val = _parse_bool(text)
        if val is None:
            raise ValueError(f"{what} expects true or false, got {text!r}")
        return val
    try:
        return base(text)
    except ValueError:
        raise ValueError(f"{what} expects {base.__name__}, got {text!r}") from None


def _convert_text(p: Param, text: str, what: str) -> Any:
    """Converts one command-line value of ``p`` (list/dict forms: :mod:`.literals`)."""
    if p.container == "list":  # value_list: a list inside a dict value (from _elem)
        items = parse_value_list(text) if p.value_list else parse_list(text)
        return [_scalar(p, v, p.base, what) for v in items]
    if p.container == "dict":
        try:
            pairs = parse_dict(text, keep_quotes=p.value_list)
        except ValueError as e:
            raise ValueError(f"{what} {e}") from None
        return {
            _scalar(p, k, p.key_type, what): (
                [_scalar(p, x, p.base, what) for x in parse_value_list(v)] if p.value_list
                else _scalar(p, v, p.base, what)
            )
            for k, v in pairs.items()
        }
    if p.optional and text.strip().lower() in ("none", "null") and p.base is not str:
        return None
    return _scalar(p, text, p.base, what)


def _convert_value(p: Param, value: Any, what: str) -> Any:
    """Checks/converts a Python value (keyword-argument form, config defaults)."""
    if value is None:
        if p.optional or p.default is None:
            return None
        raise ValueError(f"{what} cannot be None (type {p.type_text()})")
    if isinstance(value, str):
        return _convert_text(p, value, what)
    if p.container == "list":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{what} expects a list, got {type(value).__name__} {value!r}")
        return [_convert_value(_elem(p), v, what) for v in value]
    if p.container == "dict":
        if not isinstance(value, Mapping):
            raise ValueError(f"{what} expects a dict, got {type(value).__name__} {value!r}")
        elem = _elem(p, as_list=p.value_list)
        return {str(k) if p.key_type is str else k: _convert_value(elem, v, what)
                for k, v in value.items()}
    if p.base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if p.base is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if p.base in (str, bool) and isinstance(value, p.base):
        return value
    raise ValueError(f"{what} expects {p.type_text()}, got {type(value).__name__} {value!r}")


def _elem(p: Param, as_list: bool = False) -> Param:
    return Param(name=p.name, kind=Kind.OPTION, base=p.base,
                 container="list" if as_list else None, value_list=as_list)


def _merge(p: Param, old: Any, new: Any, given: bool) -> Any:
    """Repeated list/dict options accumulate; everything else is replaced."""
    if given and p.container == "list" and isinstance(old, list):
        return [*old, *new]
    if given and p.container == "dict" and isinstance(old, dict):
        return {**old, **new}
    return new


def _flag_index(spec: ComponentSpec) -> dict[str, Param]:
    index: dict[str, Param] = {}
    for p in spec.params:
        for f in p.flags:
            index[f] = p
    return index


def _config_defaults(spec: ComponentSpec, defaults: Mapping[str, Any], prog: str) -> dict[str, Any]:
    """Maps ``.tetherconfig`` keys (names or aliases, with or without dashes) to parameters."""
    by_key: dict[str, Param] = {}
    for q in spec.params:
        by_key[q.name] = q
        for f in q.flags:
            by_key[f.lstrip("-")] = q
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        p = by_key.get(key.lstrip("-"))
        if p is None:
            import difflib  # for an error's hint only: not on the start-up path

            close = difflib.get_close_matches(key, list(by_key), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ComponentArgError(
                f"default {key!r} (from [component:...] in .tetherconfig) is not an argument of "
                f"{prog}{hint}"
            )
        what = f"default {key!r} from .tetherconfig"
        try:
            if p.kind == Kind.VARARGS:
                import shlex  # only for a list given as one string in a config file

                out[p.name] = shlex.split(value) if isinstance(value, str) else list(value)
            else:
                out[p.name] = _convert_value(p, value, what)
        except ValueError as e:
            raise ComponentArgError(str(e)) from None
    return out


def _unknown(token: str, spec: ComponentSpec, usage: str) -> ComponentArgError:
    flags = [f for p in spec.params for f in p.flags]
    import difflib  # for an error's hint only: not on the start-up path

    close = difflib.get_close_matches(token.partition("=")[0], flags, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ComponentArgError(f"unrecognized argument {token!r}{hint}", usage)


def _parse_argv(
    spec: ComponentSpec, argv: Sequence[str], usage: str
) -> tuple[dict[str, Any], list[str]]:
    index = _flag_index(spec)
    varargs_p = next((p for p in spec.params if p.kind == Kind.VARARGS), None)
    given: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            if varargs_p is None:
                if i + 1 < len(argv):
                    raise _unknown(argv[i + 1], spec, usage)
                break
            rest = argv[i + 1:]
            break
        name, eq, inline = tok.partition("=")
        p = index.get(name) if tok.startswith("-") else None
        negated = False
        if p is None and tok.startswith("--no-") and not eq:
            cand = index.get("--" + tok[len("--no-"):])
            if cand is not None and cand.base is bool and not cand.container:
                p, negated = cand, True
        if p is None:
            if varargs_p is not None:
                rest = argv[i:]
                break
            raise _unknown(tok, spec, usage)
        what = f"argument {name}"
        if p.base is bool and not p.container:
            if negated:
                value: Any = False
                i += 1
            elif eq:
                value = _parse_bool(inline)
                if value is None:
                    raise ComponentArgError(f"{what} expects true or false, got {inline!r}", usage)
                i += 1
            elif i + 1 < len(argv) and _parse_bool(argv[i + 1]) is not None:
                value = _parse_bool(argv[i + 1])
                i += 2
            else:
                value = True
                i += 1
        else:
            if eq:
                text = inline
                i += 1
            elif i + 1 < len(argv):
                text = argv[i + 1]
                i += 2
            else:
                raise ComponentArgError(f"{what} expects a value ({p.type_text()})", usage)
            try:
                value = _convert_text(p, text, what)
            except ValueError as e:
                raise ComponentArgError(str(e), usage) from None
        given[p.name] = _merge(p, given.get(p.name), value, p.name in given)
    return given, rest


def _parse_mapping(
    spec: ComponentSpec, args: Mapping[str, Any], usage: str
) -> tuple[dict[str, Any], list[str]]:
    by_key: dict[str, Param] = {}
    for q in spec.params:
        by_key[q.name] = q
        for f in q.flags:
            by_key.setdefault(f.lstrip("-"), q)
    given: dict[str, Any] = {}
    rest: list[str] = []
    for key, value in args.items():
        p = by_key.get(key.lstrip("-"))
        if p is None:
            import difflib  # for an error's hint only: not on the start-up path

            close = difflib.get_close_matches(key, [q.name for q in spec.params], n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ComponentArgError(f"unknown argument {key!r}{hint}", usage)
        if p.kind == Kind.VARARGS:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ComponentArgError(
                    f"argument {key!r} (*{p.name}) expects a list of strings, got {value!r}", usage
                )
            try:
                rest = [_convert_value(p, v, f"argument *{p.name}") for v in value]
            except ValueError as e:
                raise ComponentArgError(str(e), usage) from None
            continue
        try:
            given[p.name] = _convert_value(p, value, f"argument {key!r}")
        except ValueError as e:
            raise ComponentArgError(str(e), usage) from None
    return given, rest


def wants_help(fn: Callable[..., Any], argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for the component's help (``--help`` among its options).

    A ``--help`` after ``--`` or inside the positional arguments belongs to the app.

    Args:
        fn: The component.
        argv: Its arguments.

    Returns:
        True when the help should be printed instead of running.
    """
    if "--help" not in argv:
        return False
    try:
        spec = inspect_component(fn)
        index = _flag_index(spec)
    except Exception:
        return True
    has_varargs = any(p.kind == Kind.VARARGS for p in spec.params)
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--help":
            return True
        if tok == "--":
            return False
        p = index.get(tok.partition("=")[0])
        if p is None:
            if has_varargs:
                return False
            i += 1
            continue
        if "=" in tok or (p.base is bool and not p.container and (
                i + 1 >= len(argv) or _parse_bool(argv[i + 1]) is None)):
            i += 1
        else:
            i += 2
    return False


def parse_args(
    fn: Callable[..., Any],
    args: Sequence[str] | Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    prog: str | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """Turns CLI-style or keyword arguments into the call of ``fn``.

    Args:
        fn: The component.
        args: ``["--script", "train.py", "-j", "1x2", "--", "--lr", "0.1"]`` or
            ``{"script": "train.py", "j": "1x2", "script_args": ["--lr", "0.1"]}`` (string
            values are converted like on the command line; Python values are type-checked).
        defaults: Defaults from ``[component:<name>]`` in ``.tetherconfig``.
        prog: Component name used in messages.

    Returns:
        Positional arguments and keyword arguments for ``fn``.

    Raises:
        InvalidComponentError: When ``fn`` is not a valid component.
        ComponentArgError: For a wrong, unknown or missing argument (with the usage).
    """
    spec = _spec(fn, prog)
    try:
        return _parse(fn, spec, args, defaults, prog)
    except ComponentArgError as e:
        if not e.usage:  # built only on error: formatting the usage costs a parser build
            e.usage = component_usage(fn, prog)
        raise


def _parse(
    fn: Callable[..., Any],
    spec: ComponentSpec,
    args: Sequence[str] | Mapping[str, Any],
    defaults: Mapping[str, Any] | None,
    prog: str | None,
) -> tuple[list[Any], dict[str, Any]]:
    usage = ""  # filled in by parse_args when an error is raised
    cfg = _config_defaults(spec, defaults or {}, _prog(fn, prog))
    if isinstance(args, Mapping):
        given, rest = _parse_mapping(spec, args, usage)
    elif isinstance(args, (str, bytes)):
        raise TypeError("component args must be a list of strings or a mapping, not a string "
                        "(split it with shlex.split)")
    else:
        if "--help" in args and wants_help(fn, args):
            raise ComponentArgError("--help was requested (use component_help() to show it)",
                                    usage)
        given, rest = _parse_argv(spec, args, usage)

    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    missing: list[str] = []
    for p in spec.params:
        if p.kind == Kind.VARARGS:
            if not rest and p.name in cfg:
                rest = list(cfg[p.name])
            positional.extend(rest)
            continue
        if p.name in given:
            value = given[p.name]
        elif p.name in cfg:
            value = cfg[p.name]
        elif p.default is not inspect.Parameter.empty:
            value = p.default
        else:
            missing.append(p.flags[0])
            continue
        if p.positional:
            positional.append(value)
        else:
            keywords[p.name] = value
    if missing:
        hint = ""
        stray = [t for t in rest if t.startswith("-")]
        if stray:
            hint = (f" ({stray[0]!r} was taken as a positional argument; options go before "
                    "the positional arguments)")
        raise ComponentArgError(
            f"missing required argument{'s' if len(missing) > 1 else ''}: "
            f"{', '.join(missing)}{hint}",
            usage,
        )
    if rest and not any(p.kind == Kind.VARARGS for p in spec.params):
        raise _unknown(rest[0], spec, usage)
    return positional, keywords


def _stray_hint(spec: ComponentSpec, positional: Sequence[Any]) -> str:
    """A hint when a positional argument looks like a misspelled option."""
    flags = [f for p in spec.params for f in p.flags]
    for tok in positional:
        if isinstance(tok, str) and tok.startswith("-"):
            import difflib  # for an error's hint only: not on the start-up path

            close = difflib.get_close_matches(tok.partition("=")[0], flags, n=1, cutoff=0.75)
            if close:
                return (f" (note: {tok!r} was passed to the positional arguments; did you mean "
                        f"{close[0]}?)")
            return ""
    return ""


def materialize(
    fn: Callable[..., Any],
    args: Sequence[str] | Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    prog: str | None = None,
) -> AppDef:
    """Calls a component with CLI-style or keyword arguments and returns its AppDef.

    Args:
        fn: The component function.
        args: See :func:`parse_args`.
        defaults: Defaults from ``[component:<name>]`` in ``.tetherconfig``.
        prog: Component name used in messages (e.g. ``dist.ddp``).

    Returns:
        The AppDef.

    Raises:
        InvalidComponentError: When ``fn`` is not a valid component.
        ComponentArgError: For a wrong, unknown or missing argument, or when the component
            itself rejects the values (its ``ValueError`` message, with the usage).
        TypeError: When the function does not return an AppDef.
    """
    from tether.specs import AppDef

    positional, keywords = parse_args(fn, args, defaults, prog)
    try:
        app = fn(*positional, **keywords)
    except (ValueError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        msg += _stray_hint(inspect_component(fn), positional)
        raise ComponentArgError(msg, component_usage(fn, prog)) from e
    if not isinstance(app, AppDef):
        raise TypeError(
            f"component {_prog(fn, prog)} returned {type(app).__name__}, not an AppDef"
        )
    return app
