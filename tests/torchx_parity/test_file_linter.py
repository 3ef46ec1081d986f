"""TorchX's component linter, ``specs.file_linter``, as a TorchX user's tests call it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tether.specs.file_linter import LinterMessage, get_fn_docstring, validate

GOOD = '''
from typing import Dict, List, Optional
import tether.specs as specs

def good(name: str, n: int = 1, tags: Optional[List[str]] = None,
         env: Dict[str, str] = None, *args: str) -> specs.AppDef:
    """Good component."""
    ...

def no_annotation(name, n: int) -> specs.AppDef:
    ...

def bad_complex(opts: Dict[str, List[str]], pair: Tuple[str, str],
                xs: List[List[str]]) -> specs.AppDef:
    ...

def no_return(name: str):
    ...

def wrong_return(name: str) -> str:
    ...
'''


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "comp.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _descriptions(path: str, fn: str) -> list[str]:
    return [m.description for m in validate(path, fn)]


def test_valid_component_has_no_findings(tmp_path: Path) -> None:
    assert validate(_write(tmp_path, GOOD), "good") == []


def test_findings_are_torchx_linter_messages(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    (msg,) = validate(path, "no_annotation")
    assert isinstance(msg, LinterMessage)
    assert (msg.name, msg.description, msg.line, msg.severity) == (
        "TorchxFunctionValidator", "Arg name missing type annotation", 10, "error")
    assert _descriptions(path, "bad_complex") == [
        "Dict can only have primitive types",
        "`bad_complex` allows only Dict, List as complex types.Argument `pair` has: Tuple",
        "List can only have primitive types",
    ]
    assert _descriptions(path, "no_return") == [
        "Function: no_return missing return annotation or has unknown annotations. "
        "Supported return annotation: AppDef"]
    assert _descriptions(path, "wrong_return") == [
        "Function: wrong_return has incorrect return annotation, supported annotation: AppDef"]


def test_missing_function_and_syntax_error(tmp_path: Path) -> None:
    (msg,) = validate(_write(tmp_path, GOOD), "nope")
    assert (msg.name, msg.description, msg.line) == (
        "TorchXValidator", "Function nope not found", 0)
    (msg,) = validate(_write(tmp_path, "def broken(:\n"), "broken")
    assert msg.name == "TorchXValidator" and msg.line == 1 and msg.description


def test_get_fn_docstring() -> None:
    def trainer(lr: float, epochs: int = 1) -> None:
        """Trains a model.

        Runs the training loop.

        Args:
            lr: learning rate
        """

    desc, args = get_fn_docstring(trainer)
    assert desc == "Trains a model.\nRuns the training loop."
    assert args == {"lr": "learning rate", "epochs": " "}

    def bare(x: int) -> None: ...

    desc, args = get_fn_docstring(bare)
    assert desc.startswith("bare TIP: improve this help string") and args == {"x": " "}


TUPLE_COMPONENT = '''
from typing import Tuple

from tether.specs import AppDef, Role


def comp(sizes: Tuple[int, int] = (1, 2)) -> AppDef:
    """A component with a tuple parameter.

    Args:
        sizes: two sizes
    """
    return AppDef("a", [Role("r", image="i", entrypoint="echo", args=[str(sizes)])])
'''


def test_tuple_parameters_are_rejected_by_the_linter_and_at_run_time(tmp_path: Path) -> None:
    """TorchX's newest linter accepts Tuple[...] but its parser cannot read it: tether
    rejects it both when linting and when running (a documented difference)."""
    import importlib.util

    from tether.components.args import InvalidComponentError
    from tether.components.builders import materialize_appdef

    path = tmp_path / "tuple_comp.py"
    path.write_text(TUPLE_COMPONENT)
    (msg,) = validate(str(path), "comp")
    assert "allows only Dict, List as complex types" in msg.description
    assert "`sizes` has: Tuple" in msg.description
    spec = importlib.util.spec_from_file_location("tuple_comp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(InvalidComponentError, match=r"'sizes' has unsupported type Tuple"):
        materialize_appdef(module.comp, ["--sizes", "3,4"])
