"""Options of KFP steps: how a native step sets up its pod, and what a launcher step runs in.

Nothing here imports KFP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tether.errors import SpecTypeError

MODE_AUTO = "auto"
MODE_NATIVE = "native"
MODE_LAUNCHER = "launcher"
MODES = (MODE_AUTO, MODE_NATIVE, MODE_LAUNCHER)

DEFAULT_SCHEDULER = "kubernetes"
DEFAULT_ACCELERATOR_TYPE = "nvidia.com/gpu"
ENV_LAUNCHER_IMAGE = "TETHER_KFP_LAUNCHER_IMAGE"
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "toleration_seconds"})


def default_launcher_image() -> str:
    """The image launcher steps run in: ``$TETHER_KFP_LAUNCHER_IMAGE``, else tether's image.

    Returns:
        The image (it must have tether with the ``kfp`` extra and the scheduler's client).
    """
    from tether.components import DEFAULT_IMAGE

    return os.environ.get(ENV_LAUNCHER_IMAGE) or DEFAULT_IMAGE


@dataclass
class KubernetesOptions:
    """Pod settings of native steps (set through ``kfp-kubernetes``).

    Attributes:
        accelerator_type: The extended resource GPUs are requested as.
        node_selector: Extra node labels the pod must match (named resources add theirs, e.g.
            ``node.kubernetes.io/instance-type``).
        tolerations: Extra tolerations, each a dict of ``key``, ``operator``, ``value``,
            ``effect``, ``toleration_seconds`` (as ``kfp.kubernetes.add_toleration`` takes).
        gpu_toleration: Tolerate the ``NoSchedule`` taint named after the accelerator type when
            the role asks for GPUs (the usual taint of GPU node pools). Off by default, as for
            the ``kubernetes`` scheduler, where tolerations are explicit too.
        shm: Mount a memory-backed ``/dev/shm`` unless the role mounts something there
            (PyTorch data loaders need more than the container runtime's 64 MiB; the
            ``kubernetes`` scheduler does the same).
        shm_size: Size limit of ``/dev/shm`` (e.g. ``8Gi``); None for no limit.
        image_pull_secrets: Secrets to pull the image with.
        metrics: Give the step the ``Metrics`` output artifact ``tether_metrics`` that every
            launcher step has: the job's last :func:`tether.runtime.report`, written by the
            job itself (:mod:`tether.runtime.kfp_metrics`). The container's command then
            starts with ``env`` (coreutils or busybox; the image needs it), which hands the
            job the artifact's location, so the role needs an entrypoint. Off by default:
            a step whose job never reports keeps its command as it is.
    """

    accelerator_type: str = DEFAULT_ACCELERATOR_TYPE
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    gpu_toleration: bool = False
    shm: bool = True
    shm_size: str | None = None
    image_pull_secrets: list[str] = field(default_factory=list)
    metrics: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.metrics, bool):
            raise SpecTypeError(f"KubernetesOptions.metrics={self.metrics!r} is not allowed: "
                                "use True or False")
        if not self.accelerator_type.strip():
            raise ValueError("KubernetesOptions.accelerator_type must not be empty")
        for i, tol in enumerate(self.tolerations):
            unknown = set(tol) - _TOLERATION_KEYS
            if unknown:
                raise ValueError(
                    f"KubernetesOptions.tolerations[{i}] has unknown key(s) {sorted(unknown)}; "
                    f"allowed: {sorted(_TOLERATION_KEYS)}"
                )


@dataclass
class LauncherOptions:
    """What a launcher step runs in, and how it waits.

    The step is a lightweight Python component whose code calls
    :func:`tether.adapters.kfp.launch.run_step`, so its image must have tether (with the
    ``kfp`` extra and the target scheduler's client) installed, or ``packages_to_install``
    must bring it.

    Attributes:
        image: The step's image (default :func:`default_launcher_image`).
        packages_to_install: pip requirements installed when the step starts.
        pip_index_urls: Index URLs for those installs.
        install_kfp_package: Let KFP pip-install its own SDK when the step starts (not needed
            when the image has tether's ``kfp`` extra).
        wait_interval: Seconds between status polls of schedulers that need polling.
        cancel_grace: Seconds to wait for the job to stop after the step is terminated.
        retries: KFP retries of the step itself; a retried step re-attaches to the job its
            first attempt launched (same KFP run and task) instead of launching another.
    """

    image: str | None = None
    packages_to_install: list[str] = field(default_factory=list)
    pip_index_urls: list[str] | None = None
    install_kfp_package: bool = False
    wait_interval: float = 5.0
    cancel_grace: float = 30.0
    retries: int = 0

    def __post_init__(self) -> None:
        if self.wait_interval <= 0:
            raise ValueError(f"LauncherOptions.wait_interval must be > 0, got {self.wait_interval}")
        if self.cancel_grace < 0:
            raise ValueError(f"LauncherOptions.cancel_grace must be >= 0, got {self.cancel_grace}")
        if self.retries < 0:
            raise ValueError(f"LauncherOptions.retries must be >= 0, got {self.retries}")

    def resolved_image(self) -> str:
        """The image, defaulted."""
        return self.image or default_launcher_image()
