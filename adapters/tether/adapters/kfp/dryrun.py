"""Dry-run of a KFP step or pipeline: the mode of each step and why, nothing submitted.

A step: the mode and why, the AppDef, the scheduler's request, the compiled step::

    tether kfp dryrun utils.echo -a msg=hi
    tether kfp dryrun dist.ddp -s kubernetes -a script=train.py -a j=2x8

A pipeline (``path/file.py:PIPELINE`` or ``pkg.module:PIPELINE``): one line per tether step
with its mode, and why a step that depends on a pipeline value is a launcher step::

    tether kfp dryrun examples/pipelines/kfp_train.py:train_pipeline

(``python -m tether.adapters.kfp.dryrun`` is the same command.) ``TetherStep.dryrun(**kwargs)``
returns a :class:`StepDryRun`, :func:`dryrun_pipeline` a :class:`PipelineDryRun`.
Secrets (secret-looking env values, ``--token X``-style args, URL passwords, secret-named
arguments) are masked in every layer by the one policy of :mod:`tether.specs.secrets`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.adapters.kfp.compile import CompileTargetError, load_pipeline, parse_value
from tether.adapters.kfp.records import StepRecord, recording
from tether.adapters.kfp.stepdryrun import StepDryRun, dryrun_step
from tether.adapters.kfp.steps import LauncherFallbackWarning, step

__all__ = ["PipelineDryRun", "StepDryRun", "add_arguments", "dryrun_pipeline", "dryrun_step",
           "main", "run"]


@dataclass
class PipelineDryRun:
    """The tether steps of a pipeline and their modes.

    Attributes:
        target: The pipeline.
        steps: One record per step call, in call order.
    """

    target: str
    steps: list[StepRecord]

    def __str__(self) -> str:
        lines = [f"# KFP pipeline {self.target}: {len(self.steps)} tether step(s)"]
        width = max([len(r.step) for r in self.steps] + [4])
        for r in self.steps:
            lines.append(f"{r.step:<{width}}  {r.mode:<8}  {r.component}: {r.reason}")
        warned = [r for r in self.steps if r.warnings]
        if warned:
            lines.append("")
            lines += [f"warning: step {r.step!r} is a launcher step because "
                      + "; ".join(r.warnings) for r in warned]
        return "\n".join(lines) + "\n"


def dryrun_pipeline(target: str) -> PipelineDryRun:
    """Defines a pipeline and reports the mode of each of its tether steps.

    The pipeline's module is loaded afresh (pipelines are defined when their module runs).

    Args:
        target: ``path/file.py:PIPELINE`` or ``package.module:PIPELINE``.

    Returns:
        The steps and their modes.
    """
    import warnings

    module_ref = target.rpartition(":")[0]
    with recording() as records, warnings.catch_warnings():
        warnings.simplefilter("ignore", LauncherFallbackWarning)  # reported per step below
        sys.modules.pop(module_ref, None)  # a package module: define its pipelines again
        load_pipeline(target)
    return PipelineDryRun(target, list(records))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    p = argparse.ArgumentParser(prog="tether kfp dryrun",
                                description="Show what a tether component becomes as a KFP step, "
                                "or the mode of every tether step of a pipeline.")
    add_arguments(p)
    return run(p.parse_args(argv), p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Declares the dry-run's arguments.

    Args:
        p: The parser.
    """
    p.add_argument("component", help="component name (utils.echo, pkg.module:fn, file.py:fn) "
                   "or pipeline (file.py:PIPELINE, pkg.module:PIPELINE; add --pipeline when "
                   "the name is ambiguous)")
    p.add_argument("--pipeline", action="store_true",
                   help="the target is a pipeline: show the mode of each of its steps")
    p.add_argument("-s", "--scheduler", default="kubernetes")
    p.add_argument("--mode", default="auto", choices=["auto", "native", "launcher"])
    p.add_argument("--image", default=None)
    p.add_argument("-a", "--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a component argument (VALUE is read as JSON when it parses)")
    p.add_argument("-c", "--cfg", action="append", default=[], metavar="KEY=VALUE",
                   help="a run option of the scheduler")


def run(ns: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    """Runs the dry-run.

    Args:
        ns: The parsed arguments.
        p: The parser (for usage errors).

    Returns:
        The exit code.
    """
    if ns.pipeline:
        print(dryrun_pipeline(ns.component), end="")
        return 0
    if not ns.arg and ":" in ns.component:
        try:
            print(dryrun_pipeline(ns.component), end="")
            return 0
        except CompileTargetError:
            pass  # not a pipeline: a component

    def pairs(items: list[str], what: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in items:
            key, sep, val = item.partition("=")
            if not sep or not key:
                p.error(f"{what} {item!r} is not NAME=VALUE")
            out[key] = parse_value(val)
        return out

    st = step(ns.component, scheduler=ns.scheduler, mode=ns.mode, image=ns.image,
              cfg=pairs(ns.cfg, "--cfg"))
    print(dryrun_step(st, **pairs(ns.arg, "--arg")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
