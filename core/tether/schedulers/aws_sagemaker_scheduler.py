"""TorchX's module ``torchx.schedulers.aws_sagemaker_scheduler``: the ``aws_sagemaker`` backend.

The backend lives in :mod:`tether.schedulers.aws_sagemaker`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.aws_sagemaker.scheduler import AwsSageMakerScheduler, create_scheduler

AWSSageMakerScheduler = AwsSageMakerScheduler
"""TorchX's name for :class:`AwsSageMakerScheduler`."""

__all__ = [
    "AWSSageMakerScheduler",
    "AwsSageMakerScheduler",
    "create_scheduler",
]
