"""Scheduler run options: :class:`runopts`, typed values, ``k=v`` parsing, StructuredOpts.

A scheduler declares its options once, as a :class:`StructuredOpts` dataclass whose field
docstrings are the help text; ``runopts`` is the runtime form used by the CLI (``tether
runopts``), ``.tetherconfig`` and validation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

from tether.errors import SpecError

CfgVal = str | int | float | bool | list[str] | dict[str, str] | None
"""A run option value."""

_SCALARS = (str, int, float, bool)


def _type_name(t: Any) -> str:
    if t is None or t is type(None):
        return "None"
    origin = typing.get_origin(t)
    if origin in (list, dict):
        return str(t).replace("typing.", "")
    return getattr(t, "__name__", str(t))


@dataclass
class runopt:
    """One run option.

    Attributes:
        default: Value used when the option is not given.
        opt_type: ``str``, ``int``, ``float``, ``bool``, ``list[str]`` or ``dict[str, str]``.
        is_required: Whether a value must be given.
        help: One-line description.
    """

    default: CfgVal
    opt_type: Any
    is_required: bool
    help: str

    def type_name(self) -> str:
        """The option's type as text."""
        return _type_name(self.opt_type)

    @property
    def is_type_list_of_str(self) -> bool:
        """Whether the option is a ``list[str]``."""
        return typing.get_origin(self.opt_type) is list

    @property
    def is_type_dict_of_str(self) -> bool:
        """Whether the option is a ``dict[str, str]``."""
        return typing.get_origin(self.opt_type) is dict

    def cast_to_type(self, value: str) -> CfgVal:
        """Converts a value written as text to the option's type (as ``-cfg`` does).

        ``"a,b"`` or ``"a;b"`` -> ``["a", "b"]``; ``"k:v,k2:v2"`` -> ``{"k": "v", ...}``;
        booleans are ``true/false/1/0/yes/no/on/off``.

        Args:
            value: The text.

        Returns:
            The typed value.

        Raises:
            InvalidRunConfigException: When the text cannot be read as the type.
        """
        return _convert(f"({self.type_name()})", value, self.opt_type)


def _matches(value: Any, t: Any) -> bool:
    if value is None:
        return True
    origin = typing.get_origin(t)
    if origin is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


class InvalidRunConfigException(SpecError):
    """Raised when run options are missing, unknown or of the wrong type."""


class runopts:
    """The run options of a scheduler (or workspace), by name."""

    def __init__(self) -> None:
        self._opts: dict[str, runopt] = {}
        self._aliases: dict[str, str] = {}  # another spelling -> the declared name

    def add(
        self,
        cfg_key: str,
        type_: Any,
        help: str,
        default: CfgVal = None,
        required: bool = False,
    ) -> None:
        """Declares an option.

        Args:
            cfg_key: The option's name.
            type_: Its type (see :class:`runopt`).
            help: One-line description.
            default: Default value (must be None when ``required``).
            required: Whether the user must give a value.

        Raises:
            ValueError: When the declaration is inconsistent.
        """
        if required and default is not None:
            raise ValueError(f"run option {cfg_key!r} is required and cannot have a default")
        if not _matches(default, type_):
            raise TypeError(
                f"run option {cfg_key!r}: default {default!r} is not a {_type_name(type_)}"
            )
        self._opts[cfg_key] = runopt(default, type_, required, help)

    def add_alias(self, alias: str, cfg_key: str) -> None:
        """Makes ``alias`` another name of the option ``cfg_key``.

        :meth:`StructuredOpts.as_runopts` calls it for a field whose ``cfg_key`` metadata
        differs from its name, so the option is read under the field name too (as TorchX's
        ``StructuredOpts.from_cfg`` does).

        Args:
            alias: The other spelling (e.g. the field name ``mail_user``).
            cfg_key: The declared option (e.g. ``mail-user``).

        Raises:
            ValueError: When ``cfg_key`` is not declared, or ``alias`` is another option.
        """
        if cfg_key not in self._opts:
            raise ValueError(f"run option {cfg_key!r} is not declared; cannot alias it")
        if alias in self._opts and alias != cfg_key:
            raise ValueError(f"alias {alias!r} of {cfg_key!r} is itself a run option")
        if alias != cfg_key:
            self._aliases[alias] = cfg_key

    def update(self, other: runopts) -> None:
        """Adds every option of ``other``.

        Args:
            other: More options.
        """
        self._opts.update(other._opts)
        self._aliases.update(other._aliases)

    def name_of(self, key: str) -> str | None:
        """The declared option a key a user wrote means, or None.

        ``key`` itself, an alias (a field name whose option has another ``cfg_key``), or
        the snake_case form of either (``clusterName`` -> ``cluster_name``; also in each
        part of a dotted group key, ``k8s.imageRepo`` -> ``k8s.image_repo``).

        Args:
            key: The key as written.

        Returns:
            The option's declared name.
        """
        if not isinstance(key, str):
            return None
        cands = (key, ".".join(snake_case(p) for p in key.split(".")), snake_case(key))
        for cand in cands:
            if cand in self._opts:
                return cand
            if cand in self._aliases:
                return self._aliases[cand]
        return None

    def get(self, name: str) -> runopt | None:
        """The option called ``name`` (or its camelCase spelling: ``clusterName`` finds
        ``cluster_name``; or a field name aliasing a ``cfg_key``), or None."""
        found = self.name_of(name)
        return None if found is None else self._opts[found]

    @staticmethod
    def is_type(obj: CfgVal, tp: Any) -> bool:
        """``isinstance`` that also understands ``list[str]`` and ``dict[str, str]`` (as
        TorchX's ``runopts.is_type``).

        Args:
            obj: A value.
            tp: A run option type.

        Returns:
            Whether ``obj`` is of type ``tp`` (``None`` is of no type).
        """
        try:
            return isinstance(obj, tp)
        except TypeError:
            origin = typing.get_origin(tp)
            if origin is list and isinstance(obj, list):
                return all(isinstance(e, str) for e in obj)
            if origin is dict and isinstance(obj, dict):
                return all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items())
            return False

    def __or__(self, other: runopts) -> runopts:
        """A new runopts with the options of both (``other``'s win on a clash)."""
        merged = runopts()
        merged.update(self)
        merged.update(other)
        return merged

    def cfg_from_json_repr(self, json_repr: str) -> dict[str, CfgVal]:
        """Reads options from a JSON object (``{"cluster": "c", "tags": ["a"]}``).

        List and dict values are turned into strings as their options need; ``null`` stays
        None. As with :meth:`cfg_from_str`, unknown keys are kept and :meth:`resolve` rejects
        them naming a close match.

        Args:
            json_repr: The JSON text.

        Returns:
            The options.

        Raises:
            InvalidRunConfigException: When the text is not a JSON object.
        """
        import json  # only for this form

        try:
            doc = json.loads(json_repr)
        except ValueError as e:
            raise InvalidRunConfigException(f"run options are not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise InvalidRunConfigException(
                f"run options must be a JSON object, got {type(doc).__name__}"
            )
        out: dict[str, CfgVal] = {}
        for key, val in doc.items():
            opt = self.get(key)
            if opt is not None and val is not None:
                if opt.is_type_list_of_str and isinstance(val, list):
                    val = [str(v) for v in val]
                elif opt.is_type_dict_of_str and isinstance(val, dict):
                    val = {str(k): str(v) for k, v in val.items()}
            out[key] = val
        return out

    def __iter__(self) -> Iterator[tuple[str, runopt]]:
        return iter(self._opts.items())

    def __len__(self) -> int:
        return len(self._opts)

    def __contains__(self, name: object) -> bool:
        return name in self._opts

    def _canonical(self, cfg: Mapping[str, CfgVal], where: str) -> dict[str, CfgVal]:
        """Maps camelCase keys (also inside dotted group keys) to the declared option names.

        The same option given under two spellings with equal values counts once; with
        different values it is an error.
        """
        out: dict[str, CfgVal] = {}
        spelled: dict[str, str] = {}
        for key, val in cfg.items():
            name = self.name_of(key) or key
            if name in out and out[name] != val:
                raise InvalidRunConfigException(
                    f"run option {name!r}{where} is given twice with different values (as "
                    f"{spelled[name]!r} and {key!r}); keep one"
                )
            out[name] = val
            spelled[name] = key
        return out

    def check_names(self, cfg: Mapping[str, CfgVal], scheduler: str = "") -> None:
        """Checks only that every key of ``cfg`` names a declared option (as written, an
        alias or another spelling: :meth:`name_of`); values, types and required options are
        :meth:`resolve`'s.

        Args:
            cfg: The user's options.
            scheduler: Name used in error messages.

        Raises:
            InvalidRunConfigException: For a key that is not a str, or an unknown option
                (with close matches and what is allowed).
        """
        for key in cfg:
            if not isinstance(key, str):
                raise InvalidRunConfigException(
                    f"run option names must be str, got {type(key).__name__} {key!r:.80}"
                )
            if self.name_of(key) is None:
                import difflib  # for an error's hint only: not on the start-up path

                where = f" for scheduler {scheduler!r}" if scheduler else ""
                known = list(self._opts)
                close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise InvalidRunConfigException(
                    f"unknown run option {key!r}{where}{hint} "
                    f"(allowed: {', '.join(known) or 'none'})"
                )

    def resolve(self, cfg: Mapping[str, CfgVal], scheduler: str = "") -> dict[str, CfgVal]:
        """Checks ``cfg`` and fills in defaults.

        Args:
            cfg: The user's options.
            scheduler: Name used in error messages.

        Returns:
            A new dict with every declared option.

        Raises:
            InvalidRunConfigException: For an unknown option (with close matches), a missing
                required one, or a value of the wrong type.
        """
        where = f" for scheduler {scheduler!r}" if scheduler else ""
        if not isinstance(cfg, Mapping):
            raise InvalidRunConfigException(
                f"run options{where} must be a dict of name -> value, got "
                f"{type(cfg).__name__} {cfg!r:.80}"
            )
        cfg = self._canonical(cfg, where)
        self.check_names(cfg, scheduler)
        out: dict[str, CfgVal] = {}
        for key, opt in self._opts.items():
            val = cfg.get(key, opt.default)
            if val is None and opt.is_required:
                raise InvalidRunConfigException(
                    f"required run option {key!r}{where} is missing: {opt.help} "
                    f"(pass -cfg {key}=... or set it under [{scheduler or 'scheduler'}] in "
                    ".tetherconfig)"
                )
            if isinstance(val, str) and opt.opt_type is not str:
                val = _convert(key, val, opt.opt_type)
            if isinstance(val, int) and opt.opt_type is float and not isinstance(val, bool):
                val = float(val)
            if not _matches(val, opt.opt_type):
                raise InvalidRunConfigException(
                    f"run option {key!r}{where} expects {opt.type_name()}, got "
                    f"{type(val).__name__} {val!r}"
                )
            if isinstance(val, float) and not math.isfinite(val):
                raise InvalidRunConfigException(
                    f"run option {key!r}{where} = {val!r} is not allowed: expects a finite "
                    "number"
                )
            if isinstance(val, str) and "\0" in val:
                raise InvalidRunConfigException(
                    f"run option {key!r}{where} = {val!r} contains a NUL byte"
                )
            out[key] = val
        return out

    def cfg_from_str(self, cfg_str: str) -> dict[str, CfgVal]:
        """Parses ``k=v,k2=v2`` with each value converted to its option's type (as TorchX).

        Items are separated by ``,``; an item without ``=`` continues the previous value, so
        ``hosts=h1,h2`` and ``labels=a:1,b:2`` work. Lists are written ``a;b;c`` (or with
        commas), dicts ``k:v;k2:v2`` (or with commas), booleans ``true/false/1/0/yes/no``.
        Items and list entries are stripped of surrounding spaces.

        Args:
            cfg_str: The string from ``-cfg``.

        Returns:
            The parsed options (unknown keys are kept as strings and rejected by
            :meth:`resolve`).

        Raises:
            InvalidRunConfigException: When the first item has no ``=`` or a value cannot be
                converted.
        """
        raw: dict[str, str] = {}
        last: str | None = None
        for item in cfg_str.split(","):
            if not item.strip():
                continue
            key, sep, val = item.partition("=")
            if not sep:
                if last is None:
                    raise InvalidRunConfigException(
                        f"run option {item.strip()!r} in {cfg_str!r} has no '=': write "
                        "key=value,key2=value2"
                    )
                raw[last] += "," + item
                continue
            last = key.strip()
            raw[last] = val
        out: dict[str, CfgVal] = {}
        for key, val in raw.items():
            opt = self.get(key)
            out[key] = _convert(key, val, opt.opt_type) if opt else val.strip()
        return out


def snake_case(key: str) -> str:
    """``imagePullPolicy`` -> ``image_pull_policy``; ``a.b``/``a-b`` -> ``a_b``.

    Args:
        key: A run option name as a user wrote it.

    Returns:
        Its snake_case form.
    """
    out = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key)
    return re.sub(r"[.\-]", "_", out).lower()


def _items(val: str) -> list[str]:
    return [v.strip() for v in val.replace(",", ";").split(";") if v.strip()]


def _convert(key: str, val: str, t: Any) -> CfgVal:
    origin = typing.get_origin(t)
    try:
        if t is bool:
            low = val.strip().lower()
            if low in ("true", "1", "yes", "y", "on"):
                return True
            if low in ("false", "0", "no", "n", "off"):
                return False
            raise ValueError(val)
        if t is int:
            return int(val.strip())
        if t is float:
            return float(val.strip())
        if origin is list:
            return _items(val)
        if origin is dict:
            out: dict[str, str] = {}
            for kv in _items(val):
                k, sep, v = kv.partition(":")
                if not sep:
                    raise ValueError(kv)
                out[k.strip()] = v.strip()
            return out
    except ValueError:
        raise InvalidRunConfigException(
            f"run option {key!r}: cannot read {val!r} as {_type_name(t)}"
            + (" (write k1:v1;k2:v2)" if origin is dict else "")
        ) from None
    return val


S = TypeVar("S", bound="StructuredOpts")


_DOCS_CACHE: dict[type, dict[str, str]] = {}


def _class_node(klass: type) -> Any:
    """The ``ast.ClassDef`` of a class, from its module's source file (None if unreadable).

    The module is parsed whole (by the C parser) rather than through ``inspect.getsource``,
    whose tokenizer-based search costs far more: run options are resolved on every dryrun.
    """
    import ast  # only needed for help texts: kept off the import path of every process
    import sys

    module = sys.modules.get(klass.__module__)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    scope: list[Any] = tree.body
    node = None
    for part in klass.__qualname__.split("."):
        node = next(
            (n for n in scope if isinstance(n, ast.ClassDef) and n.name == part), None
        )
        if node is None:
            return None  # defined inside a function: no docs
        scope = node.body
    return node


def _class_node_by_inspect(klass: type) -> Any:
    """The ``ast.ClassDef`` through ``inspect`` (finds classes defined inside functions)."""
    import ast
    import inspect
    import textwrap

    try:
        src = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return None
    node = ast.parse(src).body[0]
    return node if isinstance(node, ast.ClassDef) else None


def _field_docs(cls: type) -> dict[str, str]:
    """Reads the docstrings written under each annotated field of a dataclass."""
    cached = _DOCS_CACHE.get(cls)
    if cached is not None:
        return cached
    import ast

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        if not vars(klass).get("__annotations__"):
            continue  # declares no field (StructuredOpts itself): no source to parse
        body = _class_node(klass) or _class_node_by_inspect(klass)
        if body is None:
            continue
        stmts = body.body
        for i, node in enumerate(stmts[:-1]):
            nxt = stmts[i + 1]
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    _DOCS_CACHE[cls] = docs
    return docs


def _unwrap_optional(t: Any) -> Any:
    """The option type of a field: ``X | None`` is ``X``; a ``Literal`` of strings is ``str``
    (its choices are checked by the scheduler, which names the allowed values)."""
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) == 1:
            return _unwrap_optional(args[0])
    if origin is typing.Literal and all(isinstance(a, str) for a in typing.get_args(t)):
        return str
    return t


@dataclass
class StructuredOpts(Mapping[str, Any]):
    """Base for a scheduler's options dataclass; also a read-only mapping of its fields.

    ``opts["namespace"]``, ``dict(opts)`` and ``opts.get("queue")`` work as on a cfg dict.

    Declare each option as a field with a default (or none, for a required option) and a
    docstring right below it; the docstring is the option's help text::

        @dataclass
        class MyOpts(StructuredOpts):
            namespace: str = "default"
            \"\"\"Namespace to submit to.\"\"\"
    """

    @classmethod
    def as_runopts(cls) -> runopts:
        """The options as :class:`runopts` (help from the field docstrings).

        A field whose type is itself a ``StructuredOpts`` is a group: its options are
        flattened with dot-prefixed keys (field ``k8s`` with option ``context`` is
        ``k8s.context``), as TorchX does. Field metadata ``cfg_key`` names an option that
        cannot be a field name (``field(default=None, metadata={"cfg_key": "mail-user"})``);
        the option is also read under the field name (``mail_user``) and its camelCase
        spelling, as TorchX does (the same option given under two spellings with different
        values is an error).
        Fields starting with ``_`` are not options.

        Returns:
            The runopts.
        """
        opts = runopts()
        for key, alias_of, opt_type, help_, default, factory, required in _declarations(cls):
            if alias_of is not None:
                opts.add_alias(key, alias_of)
            else:
                default = default if factory is None else factory()
                opts.add(key, opt_type, help_, default=default, required=required)
        return opts

    @classmethod
    def from_cfg(cls: type[S], cfg: Mapping[str, CfgVal], scheduler: str = "") -> S:
        """Builds the options object from a cfg mapping, validating it.

        camelCase spellings of the keys are accepted (``imagePullPolicy``); groups are read
        from their dot-prefixed keys (``k8s.context``).

        Args:
            cfg: The run options.
            scheduler: Name used in error messages.

        Returns:
            The options object.

        Raises:
            InvalidRunConfigException: As :meth:`runopts.resolve`.
        """
        return cls.from_resolved(cls.as_runopts().resolve(cfg, scheduler))

    @classmethod
    def from_resolved(cls: type[S], resolved: Mapping[str, CfgVal]) -> S:
        """Builds the options object from options :meth:`runopts.resolve` already checked.

        Keys that name no field (a workspace's options) are left out.

        Args:
            resolved: What ``resolve`` returned for :meth:`as_runopts` (or a superset).

        Returns:
            The options object.
        """
        hints = _type_hints(cls)
        kwargs: dict[str, Any] = {}
        for f in _cfg_fields(cls):
            t = _unwrap_optional(hints[f.name])
            if _is_group(t):
                prefix = f"{f.name}."
                sub = {k[len(prefix):]: v for k, v in resolved.items() if k.startswith(prefix)}
                kwargs[f.name] = t.from_resolved(sub)
            elif _cfg_key(f) in resolved:
                kwargs[f.name] = resolved[_cfg_key(f)]
        return cls(**kwargs)

    def __getitem__(self, key: str) -> Any:
        _, dot, rest = key.partition(".")
        for name in _fields_named(type(self), key):
            value = getattr(self, name)
            if dot:
                if isinstance(value, StructuredOpts):
                    return value[rest]
            elif not isinstance(value, StructuredOpts):
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        hints = _type_hints(type(self))
        for f in _cfg_fields(self):
            value = getattr(self, f.name)
            if isinstance(value, StructuredOpts):
                yield from (f"{f.name}.{k}" for k in value)
            elif not _is_group(_unwrap_optional(hints[f.name])):  # an unset group: no keys
                yield _cfg_key(f)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        """Both options objects merged into one cfg dict (``other``'s values win)."""
        return {**dict(self), **dict(other)}

    @classmethod
    def get_docstrings(cls) -> dict[str, str]:
        """The help text of each option: field name -> its docstring; a group's options
        under ``group.option``."""
        docs = dict(_field_docs(cls))
        hints = _type_hints(cls)
        for f in _cfg_fields(cls):
            t = _unwrap_optional(hints[f.name])
            if _is_group(t):
                docs.update({f"{f.name}.{k}": v for k, v in t.get_docstrings().items()})
        return docs


if typing.TYPE_CHECKING:  # (not built at import: every command imports this module)
    _Decl = tuple[str, str | None, Any, str, CfgVal, typing.Callable[[], Any] | None, bool]
    """One step of building an options class's :class:`runopts` (see
    :func:`_declarations`): ``(key, alias_of, type, help, default, default_factory,
    required)``; an alias of option ``alias_of`` when that is set (the rest unused), else an
    option (a plain tuple: a dataclass more would cost every dry run its making)."""

_DECLS_CACHE: dict[type, tuple[_Decl, ...]] = {}


def _declarations(cls: type[StructuredOpts]) -> tuple[_Decl, ...]:
    """The options and aliases of an options class, in the order :meth:`runopts.add` and
    :meth:`runopts.add_alias` take them (read once per class: docstrings, type hints and
    fields do not change; a default factory is still called at each build)."""
    cached = _DECLS_CACHE.get(cls)
    if cached is not None:
        return cached
    docs = _field_docs(cls)
    hints = _type_hints(cls)
    out: list[_Decl] = []
    for f in _cfg_fields(cls):
        t = _unwrap_optional(hints[f.name])
        if _is_group(t):
            group = _declarations(t)
            # every option of the group, then its aliases (each alias as last declared)
            out += ((f"{f.name}.{d[0]}", *d[1:]) for d in group if d[1] is None)
            aliases = {d[0]: d[1] for d in group if d[1] is not None}
            out += (_alias(f"{f.name}.{a}", f"{f.name}.{k}") for a, k in aliases.items())
            continue
        required = f.default is dataclasses.MISSING and (
            f.default_factory is dataclasses.MISSING
        )
        default: CfgVal = None
        if f.default is not dataclasses.MISSING:
            default = typing.cast(CfgVal, f.default)
        factory = None if f.default_factory is dataclasses.MISSING else f.default_factory
        key = _cfg_key(f)
        out.append((key, None, t, docs.get(f.name, ""), default, factory, required))
        out.append(_alias(f.name, key))  # TorchX reads the field name too
    _DECLS_CACHE[cls] = decls = tuple(out)
    return decls


def _alias(alias: str, key: str) -> _Decl:
    return (alias, key, None, "", None, None, False)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The evaluated field types of an options class (evaluated once per class: each
    evaluation runs ``eval`` on every annotation string)."""
    return typing.get_type_hints(cls)


def _cfg_fields(cls_or_obj: Any) -> tuple[dataclasses.Field[Any], ...]:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    return _class_cfg_fields(cls)


@functools.cache
def _class_cfg_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The option fields of an options class (its fields not starting with ``_``)."""
    return tuple(f for f in dataclasses.fields(cls) if not f.name.startswith("_"))


@functools.lru_cache(maxsize=1024)
def _fields_named(cls: type, key: str) -> tuple[str, ...]:
    """The fields of options class ``cls`` that ``opts[key]`` may mean, in order: for a
    dotted key, the groups its head names; else the options it names (by ``cfg_key``, field
    name or the snake_case of either). Which one it is depends on the values (a group
    field may be unset)."""
    head, dot, _ = key.partition(".")
    names = (head, snake_case(head))
    if dot:
        return tuple(f.name for f in _class_cfg_fields(cls) if f.name in names)
    return tuple(f.name for f in _class_cfg_fields(cls) if key == _cfg_key(f) or f.name in names)


def _cfg_key(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("cfg_key", f.name))


def _is_group(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, StructuredOpts) and t is not StructuredOpts
