"""Run options of ``local_docker`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.specs import StructuredOpts

DEFAULT_STOP_TIMEOUT_S = 10


@dataclass
class LocalDockerOpts(StructuredOpts):
    """Run options of the ``local_docker`` scheduler."""

    stop_timeout: int = DEFAULT_STOP_TIMEOUT_S
    """Seconds between SIGTERM and SIGKILL when cancelling a container."""

    privileged: bool = False
    """Run the containers privileged (every device, every capability)."""

    labels: dict[str, str] = field(default_factory=dict)
    """Extra labels on every container (tether's own labels win on a clash)."""

    pull: bool = True
    """Pull a role's image when the engine does not have it (False: fail instead)."""

    image_repo: str | None = None
    """Registry/repository to push workspace images to (e.g. ``registry:5000/team``); without
    it, a workspace image is only built into the local engine."""
