"""TorchX's module path ``torchx.schedulers.aws_batch_scheduler``: the ``aws_batch`` backend.

The backend lives in :mod:`tether.schedulers.aws_batch`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler, create_scheduler

AWSBatchScheduler = AwsBatchScheduler
"""TorchX's name for :class:`AwsBatchScheduler`."""

__all__ = [
    "AWSBatchScheduler",
    "AwsBatchScheduler",
    "create_scheduler",
]
