"""The component linter: file, line and reason for every function that is not a component."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tether.components.validate import lint, lint_file, main

BAD = textwrap.dedent('''\
    from typing import Any
    from tether.specs import AppDef, Role


    def good(name: str = "x", n: int = 1) -> AppDef:
        """Fine."""
        return AppDef(name=name, roles=[Role(name="r", entrypoint="true")])


    def no_annotation(name, n: int = 1) -> AppDef:
        return AppDef(name=name)


    def no_return(name: str):
        return AppDef(name=name)


    def wrong_return(name: str) -> str:
        return name


    def bad_type(x: Any, y: set[str]) -> AppDef:
        return AppDef(name="x")


    def kwargs(**opts: str) -> AppDef:
        return AppDef(name="x")


    def bad_default(n: int = "three", m: str = None) -> AppDef:
        return AppDef(name="x")


    def untyped_list(xs: list) -> AppDef:
        return AppDef(name="x")


    def _private(x) -> AppDef:
        return AppDef(name="x")
''')


def write(tmp_path: Path, text: str = BAD) -> Path:
    f = tmp_path / "comps.py"
    f.write_text(text)
    return f


def test_each_problem_has_file_line_function_and_reason(tmp_path: Path) -> None:
    f = write(tmp_path)
    errors = lint_file(str(f))
    text = [str(e) for e in errors]
    by_fn = {e.function: e for e in errors}
    assert "good" not in by_fn and "_private" not in by_fn
    assert by_fn["no_annotation"].line == 10
    assert f"{f}:10: no_annotation: parameter 'name' has no type annotation" in text
    assert any("no_return: missing return annotation" in t for t in text)
    assert any("wrong_return: returns str, but a component must return AppDef" in t
               for t in text)
    assert any("bad_type: parameter 'x' has unsupported type Any" in t for t in text)
    assert any("bad_type: parameter 'y' has unsupported type set[str]" in t for t in text)
    assert any("kwargs: parameter '**opts' is not supported" in t for t in text)
    assert any("bad_default: parameter 'n': default 'three' does not match its type int" in t
               for t in text)
    assert any("defaults to None but its type is not Optional" in t for t in text)
    assert any("untyped_list: parameter 'xs' has type list: lists must name" in t for t in text)


def test_one_function(tmp_path: Path) -> None:
    f = write(tmp_path)
    assert lint_file(str(f), "good") == []
    assert [e.function for e in lint(f"{f}:wrong_return")] == ["wrong_return"]
    (err,) = lint_file(str(f), "missing")
    assert "no function 'missing'" in err.reason


def test_syntax_error_points_at_its_line(tmp_path: Path) -> None:
    f = write(tmp_path, "from tether.specs import AppDef\n\ndef f(:\n    pass\n")
    (err,) = lint_file(str(f))
    assert err.line == 3 and "SyntaxError" in err.reason


def test_builtins_pass_the_linter() -> None:
    assert lint("tether.components") == []


def test_command_line(tmp_path: Path, capsys: object) -> None:
    f = write(tmp_path)
    assert main([f"{f}:good"]) == 0
    assert main([str(f)]) == 1
    proc = subprocess.run(
        [sys.executable, "-m", "tether.components.validate", f"{f}:kwargs"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 1
    assert f"{f}:26: kwargs: parameter '**opts' is not supported" in proc.stdout
