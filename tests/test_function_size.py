"""Functions a reader can hold: none in the adapters and the runner is longer than ~60 lines
of code (its docstring not counted), read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = (REPO / "adapters" / "tether" / "adapters", REPO / "core" / "tether" / "runner")
MAX_LINES = 60


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    end = node.end_lineno or node.lineno
    lines = end - node.lineno + 1
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def test_no_function_is_longer_than_a_reader_can_hold() -> None:
    long: list[str] = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = _code_lines(node)
                    if n > MAX_LINES:
                        long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {n}")
    assert long == [], "split these functions:\n" + "\n".join(long)
