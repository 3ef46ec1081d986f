"""The number of NVIDIA GPUs on this host, found without importing torch.

Counts the entries of ``/proc/driver/nvidia/gpus`` (the driver's own list, no process to
start) and falls back to the lines of ``nvidia-smi -L``. Hosts without the driver have 0.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

PROC_GPUS_DIR = "/proc/driver/nvidia/gpus"
NVIDIA_SMI_TIMEOUT_S = 30.0


def count_nvidia_smi_gpus(listing: str) -> int:
    """Counts the GPUs in the output of ``nvidia-smi -L``.

    Args:
        listing: The output, one ``GPU <i>: <name> (UUID: ...)`` line per device (MIG devices
            are listed indented under their GPU and are not counted).

    Returns:
        The number of GPUs.
    """
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def host_gpu_count(proc_dir: str = PROC_GPUS_DIR) -> int:
    """The number of NVIDIA GPUs on this host.

    Args:
        proc_dir: The driver's per-GPU directory (a parameter for tests).

    Returns:
        The count; 0 when there is no driver or ``nvidia-smi`` fails.
    """
    try:
        entries = os.listdir(proc_dir)
    except OSError:
        entries = []
    if entries:
        return len(entries)
    import subprocess  # only on hosts without the driver's list: a dryrun does without it

    try:
        result = subprocess.run(
            ["nvidia-smi", "-L"],
            capture_output=True,
            text=True,
            check=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except FileNotFoundError:
        return 0
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        log.warning("`nvidia-smi -L` failed; assuming this host has no GPUs: %s", detail)
        return 0
    return count_nvidia_smi_gpus(result.stdout)
