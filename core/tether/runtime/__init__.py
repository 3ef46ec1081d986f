"""Helpers for the apps themselves (code that runs inside a job).

``rank()``, ``local_rank()``, ``world_size()`` and ``is_rank0()`` work inside and outside an
initialized ``torch.distributed`` process group and read the variables torchrun sets
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``) otherwise. ``local_device()`` is the device a
process should put its model on. ``process_group()`` initializes the default process group
and tears it down in the right order on every rank. Importing this package does not import
torch; only ``local_device()`` and ``process_group()`` do.

``report(step=3, total=10, loss=0.33)`` publishes the job's progress and metrics while it
runs; the Runner, ``tether status`` and the orchestrator adapters show the latest report.
"""

from tether.runtime.distributed import (
    is_rank0,
    local_device,
    local_rank,
    rank,
    world_size,
)
from tether.runtime.process_group import default_backend, process_group
from tether.runtime.progress import report

__all__ = [
    "default_backend",
    "is_rank0",
    "local_device",
    "local_rank",
    "process_group",
    "rank",
    "report",
    "world_size",
]
