"""Run options of ``ray`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from tether.specs import StructuredOpts

PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
"""The ``placement_strategy`` choices (Ray's placement group strategies)."""
PLACEMENT_STRATEGIES: tuple[PlacementStrategy, ...] = typing.get_args(PlacementStrategy)


@dataclass
class RayOpts(StructuredOpts):
    """Run options of the ``ray`` scheduler."""

    placement_strategy: PlacementStrategy = "PACK"
    """How the placement group spreads the replicas' bundles over nodes: PACK, SPREAD,
    STRICT_PACK or STRICT_SPREAD (one replica per node)."""

    placement_timeout: float = 0.0
    """Seconds the driver waits for the placement group before failing the job (0: forever)."""

    elastic_wait: float = 5.0
    """Roles with ``min_replicas``: seconds to wait for the replicas beyond the minimum once the
    minimum is placed; those that do not fit by then are not started."""

    python: str = "python"
    """Interpreter on the cluster that runs tether's driver (it needs ``ray`` importable)."""

    pip: list[str] = field(default_factory=list)
    """Packages the job's ``runtime_env`` installs (``pip``)."""

    env: dict[str, str] = field(default_factory=dict)
    """Variables set for the driver and every replica (``runtime_env.env_vars``); a role's own
    env wins on a clash."""

    working_dir: str | None = None
    """Directory uploaded as the job's ``working_dir`` (default: the roles' workspace
    directory, if they have one)."""

    entrypoint_num_cpus: float = 0.0
    """CPUs reserved for the driver process itself (the replicas have their own bundles)."""
