"""TorchX's module path ``torchx.schedulers.gcp_batch_scheduler``: the ``gcp_batch`` backend.

The backend lives in :mod:`tether.schedulers.gcp_batch`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.gcp_batch.scheduler import GcpBatchScheduler, create_scheduler

GCPBatchScheduler = GcpBatchScheduler
"""TorchX's name for :class:`GcpBatchScheduler`."""

__all__ = [
    "GCPBatchScheduler",
    "GcpBatchScheduler",
    "create_scheduler",
]
