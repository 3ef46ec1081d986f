"""Rank, world size and device of the current process, safe in any context.

Inside an initialized process group the answers come from ``torch.distributed``; without one,
from the environment variables torchrun sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``); with
neither, the process is alone (rank 0 of 1). Only :func:`local_device` imports torch: the other
helpers look at ``torch.distributed`` only if the app already imported it (no process group can
exist otherwise).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _initialized_dist() -> Any | None:
    """``torch.distributed`` when already imported and a default group exists, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # a partially imported torch: treat as not distributed
        return None
    return None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"${name}={raw!r} is not an integer") from None


def rank() -> int:
    """The global rank of this process.

    Returns:
        ``torch.distributed.get_rank()`` in an initialized process group, else ``$RANK``, else 0.
    """
    dist = _initialized_dist()
    if dist is not None:
        return int(dist.get_rank())
    return _env_int("RANK", 0)


def world_size() -> int:
    """The number of processes of the job.

    Returns:
        ``torch.distributed.get_world_size()`` in an initialized process group, else
        ``$WORLD_SIZE``, else 1.
    """
    dist = _initialized_dist()
    if dist is not None:
        return int(dist.get_world_size())
    return _env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    """The rank of this process on its node (which GPU it should use).

    Returns:
        ``$LOCAL_RANK``, else 0. In an initialized process group without ``$LOCAL_RANK`` (a
        launcher other than torchrun) a warning says that 0 is a guess.
    """
    if os.environ.get("LOCAL_RANK", "").strip():
        return _env_int("LOCAL_RANK", 0)
    if _initialized_dist() is not None:
        warnings.warn(
            "the torch.distributed process group is initialized but $LOCAL_RANK is not set; "
            "assuming local rank 0 (launch with torchrun or dist.ddp, or set LOCAL_RANK)",
            stacklevel=2,
        )
    return 0


def is_rank0() -> bool:
    """Whether this is the job's first process (True when not distributed)."""
    return rank() == 0


def local_device() -> torch.device:
    """The device this process should put its model and tensors on.

    In an initialized process group: ``cuda:LOCAL_RANK`` when the group's backend is NCCL, CPU
    otherwise (gloo, mpi...). Without a group: ``cuda:LOCAL_RANK`` when CUDA is available (the
    process is about to join a group, or runs alone), CPU otherwise. This imports torch.

    Returns:
        The device.
    """
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        backend = str(dist.get_backend()).lower()
        # multi-device groups report e.g. "cpu:gloo,cuda:nccl"
        if "nccl" in backend and torch.cuda.is_available():
            return torch.device("cuda", local_rank())
        return torch.device("cpu")
    if torch.cuda.is_available():
        lr = local_rank()
        return torch.device("cuda", lr if lr < torch.cuda.device_count() else 0)
    return torch.device("cpu")
