"""The component linter: reports functions that cannot be used as components.

A component needs a type annotation on every parameter (from the supported set: ``str``,
``int``, ``float``, ``bool``, ``Optional[...]``, ``list[X]``, ``dict[K, V]``, ``*args: str``),
no ``**kwargs``, defaults that match the types, and the return annotation ``AppDef``.

Use it from Python (:func:`lint_file`, :func:`lint_function`) or the command line::

    python -m tether.components.validate my_components.py          # every public function
    python -m tether.components.validate my_components.py:trainer  # one function
    python -m tether.components.validate my_project.components     # a module or package

Each problem is printed as ``file:line: function: reason``; the exit code is 1 when there is
any.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.components.params import inspect_component


@dataclass(frozen=True)
class LintError:
    """One problem of one function.

    Attributes:
        file: The source file.
        line: The line of the ``def``.
        function: The function's name.
        reason: What is wrong.
    """

    file: str
    line: int
    function: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.function}: {self.reason}"


def lint_function(fn: Callable[..., Any]) -> list[LintError]:
    """Checks one function.

    Args:
        fn: The function.

    Returns:
        Its problems (empty for a valid component).
    """
    from tether.components.finder import source_location

    file, line = source_location(fn)
    spec = inspect_component(fn)
    name = getattr(fn, "__qualname__", repr(fn))
    return [LintError(file or "<unknown>", line or 0, name, e) for e in spec.errors]


def _public_functions(module: Any) -> list[Callable[..., Any]]:
    fns = [
        fn for n, fn in inspect.getmembers(module, inspect.isfunction)
        if not n.startswith("_") and fn.__module__ == module.__name__
    ]
    return sorted(fns, key=lambda f: f.__code__.co_firstlineno)


def lint_module(module: Any) -> list[LintError]:
    """Checks every public function defined in a module.

    Args:
        module: The module.

    Returns:
        The problems, in source order.
    """
    errors: list[LintError] = []
    for fn in _public_functions(module):
        errors.extend(lint_function(fn))
    return errors


def lint_file(path: str, function: str | None = None) -> list[LintError]:
    """Checks the public functions of a Python file (or one of them).

    Args:
        path: The file.
        function: Only this function.

    Returns:
        The problems. A file that cannot be imported yields one problem at line 1 (or at the
        syntax error's line).
    """
    from tether.components.finder import ComponentNotFoundError, _load_file

    abspath = os.path.abspath(path)
    try:
        module = _load_file(abspath)
    except ComponentNotFoundError as e:
        cause = e.__cause__
        line = getattr(cause, "lineno", None) or 1
        return [LintError(abspath, int(line), "<module>", str(e))]
    if function is None:
        return lint_module(module)
    fn = getattr(module, function, None)
    if fn is None or not inspect.isfunction(fn):
        return [LintError(abspath, 1, function, f"no function {function!r} in {path}")]
    return lint_function(fn)


def lint(target: str) -> list[LintError]:
    """Checks a file, a ``file.py:fn``, a module, a package (recursively) or ``module:fn``.

    Args:
        target: What to check.

    Returns:
        The problems.
    """
    ref, sep, fn_name = target.rpartition(":")
    if not sep:
        ref, fn_name = target, ""
    if ref.endswith(".py") or os.path.isfile(ref):
        return lint_file(ref, fn_name or None)
    try:
        module = importlib.import_module(ref)
    except Exception as e:
        return [LintError(ref, 0, "<module>", f"cannot import {ref!r}: {type(e).__name__}: {e}")]
    if fn_name:
        fn = getattr(module, fn_name, None)
        if fn is None or not inspect.isfunction(fn):
            return [LintError(getattr(module, "__file__", ref) or ref, 1, fn_name,
                              f"no function {fn_name!r} in module {ref!r}")]
        return lint_function(fn)
    from tether.components.finder import DiscoveryProblem, _walk

    problems: list[DiscoveryProblem] = []
    errors: list[LintError] = []
    for mod in _walk(module, problems):
        errors.extend(lint_module(mod))
    errors.extend(LintError(p.source, 0, "<module>", p.message) for p in problems)
    return errors


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Targets (default: ``sys.argv[1:]``).

    Returns:
        0 when every function is a valid component, 1 otherwise.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tether.components.validate",
        description="Check that functions can be used as tether components.",
    )
    parser.add_argument("targets", nargs="+",
                        help="file.py, file.py:fn, package.module or package.module:fn")
    args = parser.parse_args(argv)
    errors: list[LintError] = []
    for target in args.targets:
        errors.extend(lint(target))
    for err in errors:
        print(err)
    if not errors:
        print(f"ok: {', '.join(args.targets)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
