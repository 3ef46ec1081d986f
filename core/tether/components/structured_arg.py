"""Structured component arguments: ``--name {experiment}/{run}`` and ``-j [{min}:]{n}x{m}``."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

DEFAULT_EXPERIMENT_NAME = "default-experiment"

_J = re.compile(r"^\s*(?:(?P<min>\d+)\s*:\s*)?(?P<nnodes>\d+)\s*(?:x\s*(?P<nproc>\d+))?\s*$")


def role_name_of(script: str | None, m: str | None) -> str:
    """The role name of a Python app: the script's stem or the module's last part.

    Args:
        script: A script path.
        m: A module name.

    Returns:
        The name.

    Raises:
        ValueError: When neither is given.
    """
    if script:
        return Path(script).stem
    if m:
        return m.rpartition(".")[2]
    raise ValueError("one of --script and -m is required to name the role")


@dataclass(frozen=True)
class StructuredNameArgument:
    """``--name`` as ``{experiment}/{run}``, ``{experiment}/``, ``/{run}`` or ``{run}``.

    Attributes:
        experiment_name: The experiment (``default-experiment`` when not given).
        run_name: The run: the app's name (the script or module name when not given).
    """

    experiment_name: str
    run_name: str

    @staticmethod
    def parse_from(
        name: str,
        m: str | None = None,
        script: str | None = None,
        default_experiment_name: str = DEFAULT_EXPERIMENT_NAME,
    ) -> StructuredNameArgument:
        """Parses ``name``, defaulting the run to the script or module name.

        Args:
            name: The ``--name`` value.
            m: The module (``-m``), to derive the run name.
            script: The script (``--script``), to derive the run name.
            default_experiment_name: Experiment used when none is given.

        Returns:
            The parsed name.

        Raises:
            ValueError: When ``name`` has more than one ``/``, or no run name can be derived.
        """
        name = (name or "").strip()
        if name.count("/") > 1:
            raise ValueError(
                f"--name {name!r} has more than one '/'; write {{experiment}}/{{run}}, "
                "{experiment}/, /{run} or {run}"
            )
        exp, sep, run = name.partition("/") if "/" in name else ("", "", name)
        del sep
        exp = exp.strip() or default_experiment_name
        run = run.strip() or role_name_of(script, m)
        return StructuredNameArgument(exp, run)


@dataclass(frozen=True)
class StructuredJArgument:
    """``-j [{min_nnodes}:]{nnodes}x{nproc_per_node}``.

    Attributes:
        nnodes: Number of nodes (the maximum for elastic jobs).
        nproc_per_node: Processes per node.
        min_nnodes: The fewest nodes for an elastic job (None when not elastic).
    """

    nnodes: int
    nproc_per_node: int
    min_nnodes: int | None = None

    def __str__(self) -> str:
        prefix = f"{self.min_nnodes}:" if self.min_nnodes is not None else ""
        return f"{prefix}{self.nnodes}x{self.nproc_per_node}"

    @staticmethod
    def _match(j: str) -> re.Match[str]:
        m = _J.match(j or "")
        if not m:
            raise ValueError(
                f"-j {j!r} is not [{{min_nnodes}}:]{{nnodes}}x{{nproc_per_node}} "
                "(examples: 1x2, 2x8, 1:4x8)"
            )
        return m

    @staticmethod
    def _build(min_s: str | None, nnodes: int, nproc: int, j: str) -> StructuredJArgument:
        min_nnodes = int(min_s) if min_s is not None else None
        if nnodes < 1 or nproc < 1:
            raise ValueError(f"-j {j!r}: nnodes and nproc_per_node must be at least 1")
        if min_nnodes is not None and not 0 <= min_nnodes <= nnodes:
            raise ValueError(
                f"-j {j!r}: min_nnodes ({min_nnodes}) must be between 0 and nnodes ({nnodes})"
            )
        return StructuredJArgument(nnodes, nproc, min_nnodes)

    @staticmethod
    def parse(j: str) -> StructuredJArgument:
        """Parses a fully specified ``-j`` (with ``x{nproc_per_node}``).

        Args:
            j: The value.

        Returns:
            The parsed value.

        Raises:
            ValueError: When malformed, naming the allowed forms.
        """
        m = StructuredJArgument._match(j)
        if m.group("nproc") is None:
            raise ValueError(
                f"-j {j!r} has no x{{nproc_per_node}}; write e.g. {m.group('nnodes')}x1 "
                "(dist.spmd infers it from the named resource's GPU count)"
            )
        return StructuredJArgument._build(
            m.group("min"), int(m.group("nnodes")), int(m.group("nproc")), j
        )

    @staticmethod
    def parse_from(h: str | None, j: str) -> StructuredJArgument:
        """Parses ``-j``, inferring ``nproc_per_node`` from the GPUs of the named resource.

        ``-j 2`` with ``-h gpu.xlarge`` (8 GPUs) is ``2x8``. An explicit ``nproc_per_node``
        above the GPU count is kept, with a warning.

        Args:
            h: A named resource (may be None when ``j`` is complete).
            j: The value.

        Returns:
            The parsed value.

        Raises:
            ValueError: When ``nproc_per_node`` is missing and cannot be inferred.
        """
        from tether.specs import resource

        m = StructuredJArgument._match(j)
        gpus = resource(h=h).gpu if h else 0
        if m.group("nproc") is None:
            if gpus <= 0:
                raise ValueError(
                    f"-j {j!r}: cannot infer nproc_per_node: "
                    + (f"named resource {h!r} has no GPUs" if h else "no -h named resource")
                    + f"; write -j {j}x{{nproc_per_node}}"
                )
            nproc = gpus
        else:
            nproc = int(m.group("nproc"))
            if gpus > 0 and nproc > gpus:
                warnings.warn(
                    f"-j {j}: {nproc} processes per node but {h!r} has {gpus} GPUs; processes "
                    "will share GPUs",
                    stacklevel=2,
                )
        return StructuredJArgument._build(m.group("min"), int(m.group("nnodes")), nproc, j)
