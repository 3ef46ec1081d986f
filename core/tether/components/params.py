"""What a component's signature and docstring say about its arguments.

:func:`inspect_component` reads a function once and returns one :class:`Param` per parameter
(its kind, type, default, option strings and help text) plus the problems that make it an
invalid component. Both the argument parser (:mod:`tether.components.args`) and the linter
(:mod:`tether.components.validate`) build on it, so they always agree.

Supported parameter types: ``str``, ``int``, ``float``, ``bool``, ``Optional[...]`` of these,
``list[X]`` and ``dict[K, V]`` with scalar ``X``/``K``/``V``, ``dict[K, list[X]]`` (a list per
key), and ``*args`` of a scalar type.
``Annotated[T, "-x", ...]`` adds short aliases (any metadata string that starts with ``-``).
"""

from __future__ import annotations

import contextlib
import inspect
import types
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Union

SCALARS: tuple[type, ...] = (str, int, float, bool)

ALLOWED_TYPES_TEXT = (
    "str, int, float, bool, Optional[...] of these, list[str] (or of int/float), "
    "dict[str, str] (or of scalars), dict[str, list[str]], and *args: str"
)


class Kind:
    """How a parameter is passed on the command line."""

    OPTION = "option"
    VARARGS = "varargs"


@dataclass
class Param:
    """One parameter of a component.

    Attributes:
        name: The Python name.
        kind: :attr:`Kind.OPTION` (``--name VALUE``) or :attr:`Kind.VARARGS` (``*args``).
        base: ``str``, ``int``, ``float`` or ``bool`` (the element type of lists, the value
            type of dicts).
        container: ``None``, ``"list"`` or ``"dict"``.
        key_type: The key type of a dict.
        value_list: Whether each value of a dict is a list of ``base``
            (``dict[str, list[str]]``).
        optional: Whether None is allowed (``Optional[...]``).
        default: The default (``inspect.Parameter.empty`` when required).
        flags: Option strings, canonical first (``--script``; ``-j``, ``--j``; aliases).
        help: Help text from the docstring.
        positional: Whether the parameter must be passed positionally when calling the
            function (it comes before ``*args``).
    """

    name: str
    kind: str
    base: type = str
    container: str | None = None
    key_type: type = str
    value_list: bool = False
    optional: bool = False
    default: Any = inspect.Parameter.empty
    flags: list[str] = field(default_factory=list)
    help: str = ""
    positional: bool = False

    @property
    def required(self) -> bool:
        """Whether the signature gives no default."""
        return self.kind == Kind.OPTION and self.default is inspect.Parameter.empty

    def type_text(self) -> str:
        """The type as users read it (``int``, ``list[str]``, ``dict[str, str]``)."""
        if self.container == "list":
            text = f"list[{self.base.__name__}]"
        elif self.container == "dict":
            value = f"list[{self.base.__name__}]" if self.value_list else self.base.__name__
            text = f"dict[{self.key_type.__name__}, {value}]"
        else:
            text = self.base.__name__
        return f"Optional[{text}]" if self.optional else text


@dataclass
class ComponentSpec:
    """Everything the signature and docstring say.

    Attributes:
        params: The parameters, in signature order.
        description: The docstring without its sections.
        short_description: The docstring's first line.
        errors: Why the function is not a valid component (empty when it is).
        returns_appdef: Whether the return annotation is ``AppDef``.
    """

    params: list[Param]
    description: str
    short_description: str
    errors: list[str]
    returns_appdef: bool


def option_flags(name: str) -> list[str]:
    """The option strings of a parameter: ``--name``; ``-x``/``--x`` for one letter.

    ``--max-retries`` is accepted as an alias of ``--max_retries``.

    Args:
        name: The parameter's name.

    Returns:
        The strings, canonical first.
    """
    if len(name) == 1:
        return [f"-{name}", f"--{name}"]
    flags = [f"--{name}"]
    if "_" in name.strip("_"):
        flags.append(f"--{name.replace('_', '-')}")
    return flags


def _unwrap_annotated(t: Any) -> tuple[Any, list[str], str]:
    aliases: list[str] = []
    help_text = ""
    if typing.get_origin(t) is Annotated:
        t, *meta = typing.get_args(t)
        for m in meta:
            if isinstance(m, str) and m.startswith("-") and len(m) > 1:
                aliases.append(m)
            elif isinstance(m, str) and not help_text:
                help_text = m
    return t, aliases, help_text


def _unwrap_optional(t: Any) -> tuple[Any, bool]:
    if typing.get_origin(t) in (Union, types.UnionType):
        args = typing.get_args(t)
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1 and len(args) == 2:
            return non_none[0], True
    return t, False


def _describe(t: Any) -> str:
    text = getattr(t, "__name__", None) if isinstance(t, type) else None
    return text or str(t).replace("typing.", "")


def _list_element(t: Any) -> type | None:
    """The element type of ``list[X]`` with ``X`` str, int or float (else None)."""
    if typing.get_origin(t) in (list, typing.List):  # noqa: UP006
        args = typing.get_args(t)
        if args and args[0] in SCALARS and args[0] is not bool:
            return args[0]
    return None


def _classify(name: str, t: Any, param: Param) -> str | None:
    """Fills ``param.base/container/key_type/optional`` from ``t``; returns an error or None."""
    t, param.optional = _unwrap_optional(t)
    if t in SCALARS:
        param.base = t
        return None
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin in (list, typing.List) or t in (list, typing.List):  # noqa: UP006
        elem = args[0] if args else None
        if elem in SCALARS and elem is not bool:
            param.container, param.base = "list", elem
            return None
        return (
            f"parameter {name!r} has type {_describe(t)}: lists must name their element type, "
            "one of str, int, float (e.g. list[str])"
        )
    if origin in (dict, typing.Dict) or t in (dict, typing.Dict):  # noqa: UP006
        if len(args) == 2 and args[0] in SCALARS and args[1] in SCALARS:
            param.container, param.key_type, param.base = "dict", args[0], args[1]
            return None
        elem = _list_element(args[1]) if len(args) == 2 and args[0] in SCALARS else None
        if elem is not None:
            param.container, param.key_type, param.base = "dict", args[0], elem
            param.value_list = True
            return None
        return (
            f"parameter {name!r} has type {_describe(t)}: dicts must name scalar key and value "
            "types (e.g. dict[str, str]) or lists of scalar values (dict[str, list[str]])"
        )
    return f"parameter {name!r} has unsupported type {_describe(t)}; allowed: {ALLOWED_TYPES_TEXT}"


def _is_appdef(t: Any) -> bool:
    from tether.specs import AppDef

    return isinstance(t, type) and issubclass(t, AppDef)


def _docstring(fn: Callable[..., Any]) -> tuple[str, str, dict[str, str]]:
    from tether.components._docstrings import parse_google

    raw = inspect.getdoc(fn) or ""
    parsed = parse_google(raw)
    if parsed is not None:
        short_description, long_description, helps = parsed
    else:  # a shape the plain reader does not decide: the full parser
        import docstring_parser

        try:
            doc = docstring_parser.parse(raw, docstring_parser.DocstringStyle.GOOGLE)
        except docstring_parser.ParseError:
            return raw.strip(), raw.strip().split("\n", 1)[0], {}
        helps = {}
        for p in doc.params:
            key = p.arg_name.lstrip("*").split(" ")[0]
            helps[key] = " ".join((p.description or "").split())
        short_description = doc.short_description or ""
        long_description = doc.long_description or ""
    parts = [short_description, long_description]
    description = "\n\n".join(p for p in parts if p).strip()
    return _plain(description), _plain(short_description.strip()), {
        k: _plain(v) for k, v in helps.items()
    }


def _plain(text: str) -> str:
    """Drops reST literal markup (````x````) for terminal output."""
    return text.replace("``", "`")


def _check_default(p: Param) -> str | None:
    d = p.default
    if d is inspect.Parameter.empty or d is None:
        if d is None and not p.optional and p.kind == Kind.OPTION:
            return f"parameter {p.name!r} defaults to None but its type is not Optional[...]"
        return None
    if p.container == "list":
        ok = isinstance(d, (list, tuple))
    elif p.container == "dict":
        ok = isinstance(d, dict)
    elif p.base is float:
        ok = isinstance(d, (int, float)) and not isinstance(d, bool)
    elif p.base is int:
        ok = isinstance(d, int) and not isinstance(d, bool)
    else:
        ok = isinstance(d, p.base)
    if not ok:
        return f"parameter {p.name!r}: default {d!r} does not match its type {p.type_text()}"
    return None


_SPECS: weakref.WeakKeyDictionary[Callable[..., Any], ComponentSpec] = (
    weakref.WeakKeyDictionary()
)


def inspect_component(fn: Callable[..., Any]) -> ComponentSpec:
    """Reads a component's parameters, help texts and problems.

    The result is cached per function object (treat it as read-only): adapters materialize
    the same component once per task or step, and reading the signature and docstring again
    each time dominated building large pipelines.

    Args:
        fn: The function.

    Returns:
        The spec; ``errors`` lists every reason it cannot be used as a component.
    """
    try:
        cached = _SPECS.get(fn)
    except TypeError:  # not weak-referenceable: no caching
        cached = None
    if cached is not None:
        return cached
    spec = _inspect_component(fn)
    with contextlib.suppress(TypeError):
        _SPECS[fn] = spec
    return spec


def _inspect_component(fn: Callable[..., Any]) -> ComponentSpec:
    errors: list[str] = []
    if not callable(fn) or not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return ComponentSpec([], "", "", [f"{fn!r} is not a function"], False)
    description, short, helps = _docstring(fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        return ComponentSpec([], description, short, [f"cannot read the signature: {e}"], False)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # NameError for unresolvable forward references, and friends
        return ComponentSpec(
            [], description, short,
            [f"cannot resolve the type annotations ({type(e).__name__}: {e}); annotations "
             "must name types importable from the component's module"],
            False,
        )

    returns_appdef = False
    if "return" not in hints:
        errors.append("missing return annotation: a component must be annotated -> AppDef")
    else:
        ret, _, _ = _unwrap_annotated(hints["return"])
        returns_appdef = _is_appdef(ret)
        if not returns_appdef:
            errors.append(f"returns {_describe(ret)}, but a component must return AppDef")

    params: list[Param] = []
    has_varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    seen_flags: dict[str, str] = {}
    for name, sp in sig.parameters.items():
        if sp.kind is sp.VAR_KEYWORD:
            errors.append(
                f"parameter '**{name}' is not supported: declare each option as a typed "
                "parameter (dict[str, str] for free-form key=value pairs)"
            )
            continue
        kind = Kind.VARARGS if sp.kind is sp.VAR_POSITIONAL else Kind.OPTION
        param = Param(name=name, kind=kind, default=sp.default, help=helps.get(name, ""))
        param.positional = has_varargs and sp.kind in (sp.POSITIONAL_ONLY,
                                                       sp.POSITIONAL_OR_KEYWORD)
        if name not in hints:
            what = f"*{name}" if kind == Kind.VARARGS else name
            errors.append(f"parameter {what!r} has no type annotation")
            params.append(param)
            continue
        t, aliases, ann_help = _unwrap_annotated(hints[name])
        if ann_help and not param.help:
            param.help = ann_help
        err = _classify(name, t, param)
        if err:
            errors.append(err)
        elif kind == Kind.VARARGS and (param.container or param.optional):
            errors.append(f"parameter '*{name}' must be a scalar type (e.g. *{name}: str)")
        if kind == Kind.OPTION:
            param.flags = option_flags(name) + [a for a in aliases if a not in option_flags(name)]
            for flag in param.flags:
                if flag == "--help":
                    errors.append(f"parameter {name!r}: the option '--help' is reserved")
                elif flag in seen_flags:
                    errors.append(
                        f"option {flag!r} of parameter {name!r} is already used by parameter "
                        f"{seen_flags[flag]!r}"
                    )
                seen_flags[flag] = name
            if not err:
                derr = _check_default(param)
                if derr:
                    errors.append(derr)
        params.append(param)
    return ComponentSpec(params, description, short, errors, returns_appdef)


def returns_appdef_annotation(fn: Callable[..., Any]) -> bool:
    """Cheap check (no type resolution): is ``fn`` annotated to return an AppDef?

    Used to tell components from helper functions when a module is scanned.

    Args:
        fn: A function.

    Returns:
        True when the raw return annotation is AppDef or a string ending in ``AppDef``.
    """
    ann = getattr(fn, "__annotations__", {}).get("return")
    if isinstance(ann, str):
        return ann.strip().strip("'\"").split(".")[-1] == "AppDef"
    return _is_appdef(ann)
