"""Compiles a KFP pipeline to YAML from the command line.

::

    python -m tether.adapters.kfp.compile examples/pipelines/kfp_train.py:train_pipeline out.yaml
    python -m tether.adapters.kfp.compile my_project.pipelines:train out.yaml -p epochs=3

The target is ``path/to/file.py:NAME`` or ``package.module:NAME``, where ``NAME`` is a
``@dsl.pipeline`` function. ``-p NAME=VALUE`` overrides defaults of pipeline parameters (VALUE
is read as JSON when it parses). Upload the YAML to Kubeflow Pipelines or run it with
``kfp.local``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from tether.errors import SpecError


class CompileTargetError(SpecError):
    """The target does not name a pipeline."""


def _load_module(ref: str) -> ModuleType:
    if ref.endswith(".py") or os.sep in ref or "/" in ref:
        path = os.path.abspath(ref)
        if not os.path.isfile(path):
            raise CompileTargetError(f"no such file: {ref}")
        name = "tether_kfp_pipeline_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CompileTargetError(f"cannot load {ref} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(ref)
    except ModuleNotFoundError as e:
        raise CompileTargetError(f"cannot import module {ref!r}: {e}") from e


def load_pipeline(target: str) -> Any:
    """Finds the pipeline a target names.

    Args:
        target: ``path/file.py:NAME`` or ``package.module:NAME``.

    Returns:
        The pipeline (a KFP graph component).

    Raises:
        CompileTargetError: When the target is malformed or does not name a pipeline.
    """
    from kfp.dsl.graph_component import GraphComponent

    module_ref, sep, attr = target.rpartition(":")
    if not sep or not module_ref or not attr:
        raise CompileTargetError(
            f"target {target!r} must be MODULE:PIPELINE, e.g. "
            "examples/pipelines/kfp_train.py:train_pipeline or my_pkg.pipelines:train"
        )
    module = _load_module(module_ref)
    if not hasattr(module, attr):
        pipelines = [n for n, v in vars(module).items() if isinstance(v, GraphComponent)]
        close = difflib.get_close_matches(attr, pipelines, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CompileTargetError(
            f"{module_ref} has no {attr!r}{hint} "
            f"(pipelines there: {', '.join(pipelines) or 'none'})"
        )
    obj = getattr(module, attr)
    if not isinstance(obj, GraphComponent):
        raise CompileTargetError(
            f"{target} is a {type(obj).__name__}, not a pipeline: decorate it with @dsl.pipeline"
        )
    return obj


def compile_pipeline(
    target: str,
    out: str,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> str:
    """Compiles a pipeline to a YAML file.

    Args:
        target: ``path/file.py:NAME`` or ``package.module:NAME``.
        out: The YAML file to write (directories are created).
        params: Defaults of pipeline parameters to override.
        name: The pipeline's name (default: its own).

    Returns:
        The path written.
    """
    from kfp import compiler

    pipeline = load_pipeline(target)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    compiler.Compiler().compile(
        pipeline, out, pipeline_name=name, pipeline_parameters=dict(params) if params else None
    )
    return out


def parse_value(text: str) -> Any:
    """A ``-p k=v`` value: JSON when it parses as JSON (numbers, lists...), else the text.

    Args:
        text: The value as typed.

    Returns:
        The value.
    """
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0, or 2 for a bad target.
    """
    p = argparse.ArgumentParser(prog="python -m tether.adapters.kfp.compile",
                                description="Compile a KFP pipeline to YAML.")
    p.add_argument("target", help="path/file.py:PIPELINE or package.module:PIPELINE")
    p.add_argument("out", help="the YAML file to write")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a pipeline parameter's default")
    p.add_argument("--name", default=None, help="the pipeline's name")
    ns = p.parse_args(argv)
    params: dict[str, Any] = {}
    for item in ns.param:
        key, sep, val = item.partition("=")
        if not sep or not key:
            p.error(f"--param {item!r} is not NAME=VALUE")
        params[key] = parse_value(val)
    try:
        path = compile_pipeline(ns.target, ns.out, params, ns.name)
    except CompileTargetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"compiled {ns.target} to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
