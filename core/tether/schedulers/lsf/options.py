"""Run options of ``lsf`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from tether.specs import StructuredOpts

GpuMode = Literal["shared", "exclusive_process"]
"""The ``gpu_mode`` choices (the ``mode=`` of ``bsub -gpu``)."""
GPU_MODES: tuple[GpuMode, ...] = typing.get_args(GpuMode)


@dataclass
class LsfOpts(StructuredOpts):
    """Run options of the ``lsf`` scheduler."""

    queue: str | None = None
    """Queue to submit to (``bsub -q``; default: the cluster's default queue)."""

    project: str | None = None
    """Project to charge (``bsub -P``)."""

    log_dir: str | None = None
    """Directory, on a file system shared with the execution hosts, for the replicas' logs
    (``<log_dir>/<app>/<role>/<k>.log``); default: ``./.tether/lsf`` under the current
    directory."""

    cwd: str | None = None
    """Working directory of the job (``bsub -cwd``; default: the role's workspace directory or
    the current directory)."""

    wall_time: str | None = None
    """Run limit ``[hours:]minutes`` (``bsub -W``)."""

    gpu_mode: GpuMode | None = None
    """GPU mode for ``-gpu``: shared or exclusive_process (default: the cluster's)."""

    resource: str | None = None
    """Extra resource requirement string joined to tether's (``-R``, e.g.
    ``select[type==X86_64]``)."""

    bsub_args: list[str] = field(default_factory=list)
    """Extra ``#BSUB`` options, e.g. ``-G group`` (each item one option with its value)."""
