"""TorchX's module path ``torchx.schedulers.slurm_scheduler``: the ``slurm`` backend.

The backend lives in :mod:`tether.schedulers.slurm`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler

__all__ = [
    "SlurmScheduler",
    "create_scheduler",
]
