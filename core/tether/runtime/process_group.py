"""Initialize and tear down the default ``torch.distributed`` process group in the right order.

A rank that leaves the group while a peer still talks to it can bring the peer down (with
gloo, the last rank still inside a collective or the transport's teardown may abort with
``terminate called without an active exception``). :func:`process_group` makes every rank
reach teardown before any rank tears down, and keeps a failing rank out of collectives so it
exits with its own error instead of hanging::

    from tether.runtime import process_group

    with process_group():          # gloo on CPU, nccl when CUDA is present
        train()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from tether.runtime.distributed import local_rank


def default_backend() -> str:
    """``nccl`` when CUDA devices are present, ``gloo`` otherwise (imports torch).

    Returns:
        The backend name.
    """
    import torch

    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"


@contextlib.contextmanager
def process_group(
    backend: str | None = None,
    timeout: timedelta | None = None,
    **init_kwargs: Any,
) -> Iterator[Any]:
    """Joins the default process group for the duration of the ``with`` block.

    On entry it calls ``torch.distributed.init_process_group`` (rank, world size and the
    rendezvous come from the environment torchrun and ``dist.ddp`` set). On a normal exit
    every rank waits for the others (a barrier) and then destroys the group, so no rank
    closes its connections while a peer still uses them. When the block raises, the rank
    skips the barrier (its peers may never reach it) and re-raises: the launcher then stops
    the other ranks.

    Nothing happens when a default group already exists (the caller owns it).

    Args:
        backend: ``gloo``, ``nccl``... (default: :func:`default_backend`).
        timeout: How long collectives (the final barrier too) wait for a slow peer.
        **init_kwargs: Passed on to ``init_process_group``.

    Yields:
        The ``torch.distributed`` module.
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        yield dist
        return
    backend = backend or default_backend()
    if "nccl" in backend and torch.cuda.is_available():
        torch.cuda.set_device(local_rank() % max(torch.cuda.device_count(), 1))
    if timeout is not None:
        init_kwargs["timeout"] = timeout
    dist.init_process_group(backend=backend, **init_kwargs)
    try:
        yield dist
    except BaseException:
        # no barrier: the peers may be blocked elsewhere; a gloo group is torn down locally,
        # an nccl group is left to the process exit (its destroy is collective)
        if dist.is_initialized() and "nccl" not in str(dist.get_backend()).lower():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        raise
    if dist.is_initialized():
        if "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available():
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()
        dist.destroy_process_group()
