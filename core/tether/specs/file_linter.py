"""TorchX's module path ``torchx.specs.file_linter``: a component's source checked without
importing it.

:func:`validate` parses a Python file and checks one function as TorchX's linter does: every
parameter annotated, complex types only ``Dict``/``List`` (optionally ``Optional[...]``) of
primitive types, and the return annotation ``AppDef``. Each finding is a
:class:`LinterMessage` whose ``description`` is TorchX's text. :func:`get_fn_docstring` reads
a component's description and parameter help from its Google-style docstring.

tether's own linter, which also imports the function and checks its defaults, is
``python -m tether.components.validate``.
"""

from __future__ import annotations

import abc
import ast
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_COMPLEX = ("Dict", "List", "dict", "list")
_RETURN = "AppDef"
_DOC_HINT = (
    "TIP: improve this help string by adding a docstring\nto your component (see: "
    "https://pytorch.org/torchx/latest/component_best_practices.html)"
)


@dataclass
class LinterMessage:
    """One finding of the linter.

    Attributes:
        name: Which check found it (``TorchxFunctionValidator`` or ``TorchXValidator``).
        description: What is wrong, in TorchX's words.
        line: The line of the function or parameter (0 when the function is missing).
        char: The column (0 unless a syntax error gives one).
        severity: Always ``error``.
    """

    name: str
    description: str
    line: int
    char: int
    severity: str = "error"


class TorchxFunctionValidator(abc.ABC):
    """A check of one component function's definition."""

    @abc.abstractmethod
    def validate(self, app_specs_func_def: ast.FunctionDef) -> list[LinterMessage]:
        """Checks the function.

        Args:
            app_specs_func_def: Its parsed definition.

        Returns:
            The findings (empty when it passes).
        """

    def _gen_linter_message(self, description: str, lineno: int) -> LinterMessage:
        return LinterMessage("TorchxFunctionValidator", description, lineno, 0)


def _subscript_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Subscript):
        base = node.value
        if isinstance(base, ast.Name):
            return base.id
        if isinstance(base, ast.Attribute):
            return base.attr
    return None


def _without_optional(node: ast.expr) -> ast.expr:
    if _subscript_name(node) == "Optional":
        return node.slice  # type: ignore[attr-defined]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(other, ast.Constant) and other.value is None:
                return side
    return node


class TorchxFunctionArgsValidator(TorchxFunctionValidator):
    """Every parameter annotated; complex types only ``Dict``/``List`` of primitives."""

    def validate(self, app_specs_func_def: ast.FunctionDef) -> list[LinterMessage]:
        """Checks each parameter (``*args`` and keyword-only ones included).

        Args:
            app_specs_func_def: The parsed function.

        Returns:
            The findings.
        """
        a = app_specs_func_def.args
        params = [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs]
        out: list[LinterMessage] = []
        for arg in params:
            out += self._validate_arg_def(app_specs_func_def.name, arg)
        return out

    def _validate_arg_def(self, function_name: str, arg_def: ast.arg) -> list[LinterMessage]:
        if arg_def.annotation is None:
            return [self._gen_linter_message(
                f"Arg {arg_def.arg} missing type annotation", arg_def.lineno)]
        annotation = _without_optional(arg_def.annotation)
        type_name = _subscript_name(annotation)
        if type_name is None:  # a plain name (str, int, ...) or a string annotation
            return []
        if type_name not in _COMPLEX:
            return [self._gen_linter_message(
                f"`{function_name}` allows only Dict, List as complex types."
                f"Argument `{arg_def.arg}` has: {type_name}", arg_def.lineno)]
        inner = annotation.slice  # type: ignore[attr-defined]
        if type_name.lower() == "dict":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return [
                self._gen_linter_message("Dict can only have primitive types", arg_def.lineno)
                for el in elts if not isinstance(el, ast.Name)
            ]
        if not isinstance(inner, ast.Name):
            return [self._gen_linter_message("List can only have primitive types",
                                             arg_def.lineno)]
        return []


class TorchxReturnValidator(TorchxFunctionValidator):
    """The return annotation is ``AppDef`` (or ``specs.AppDef``, or the string)."""

    def validate(self, app_specs_func_def: ast.FunctionDef) -> list[LinterMessage]:
        """Checks the return annotation.

        Args:
            app_specs_func_def: The parsed function.

        Returns:
            The findings.
        """
        ret = app_specs_func_def.returns
        name: object = None
        if isinstance(ret, ast.Attribute):
            name = ret.attr
        elif isinstance(ret, ast.Name):
            name = ret.id
        elif isinstance(ret, ast.Constant):
            name = ret.value
        fn, line = app_specs_func_def.name, app_specs_func_def.lineno
        if not name:
            return [self._gen_linter_message(
                f"Function: {fn} missing return annotation or has unknown annotations. "
                f"Supported return annotation: {_RETURN}", line)]
        if name != _RETURN:
            return [self._gen_linter_message(
                f"Function: {fn} has incorrect return annotation, supported annotation: "
                f"{_RETURN}", line)]
        return []


def _functions(node: ast.AST) -> list[ast.FunctionDef]:
    """The ``def``s under ``node`` that are not inside another function."""
    out: list[ast.FunctionDef] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef):
            out.append(child)
        elif not isinstance(child, ast.AsyncFunctionDef | ast.Lambda):
            out += _functions(child)
    return out


def validate(
    path: str,
    component_function: str,
    validators: Sequence[TorchxFunctionValidator] | None = None,
) -> list[LinterMessage]:
    """Checks one function of a Python file as a component, without importing the file.

    Args:
        path: The Python source file.
        component_function: The function's name (a ``def`` not inside another function).
        validators: The checks (default: the arguments and the return annotation).

    Returns:
        The findings: empty for a valid component; a syntax error or a missing function is
        one finding named ``TorchXValidator``.
    """
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        module = ast.parse(source, filename=path)
    except SyntaxError as ex:
        return [LinterMessage("TorchXValidator", ex.msg, ex.lineno or 0, ex.offset or 0)]
    checks = list(validators) if validators is not None else [
        TorchxFunctionArgsValidator(), TorchxReturnValidator()]
    found = [n for n in _functions(module) if n.name == component_function]
    if not found:
        return [LinterMessage("TorchXValidator", f"Function {component_function} not found",
                              0, 0)]
    return [msg for node in found for check in checks for msg in check.validate(node)]


def get_fn_docstring(fn: Callable[..., object]) -> tuple[str, dict[str, str]]:
    """A function's description and each parameter's help, from its Google-style docstring.

    Without a docstring the description is the function's name and a tip; a parameter the
    docstring does not describe gets ``" "`` (so argparse still shows its default).

    Args:
        fn: The function.

    Returns:
        The description (summary, then the long description on the next line) and the help
        of each parameter by name.
    """
    from docstring_parser import parse

    name = getattr(fn, "__name__", "component")
    default_desc = f"{name} {_DOC_HINT}"
    args_desc = {p: " " for p in inspect.signature(fn).parameters}
    doc = inspect.getdoc(fn)
    if not doc:
        return default_desc, args_desc
    parsed = parse(doc)
    for param in parsed.params:
        if param.description is not None:
            args_desc[param.arg_name] = param.description
    desc = parsed.short_description or default_desc
    if parsed.long_description:
        desc += "\n" + parsed.long_description
    return desc, args_desc
