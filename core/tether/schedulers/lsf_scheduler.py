"""TorchX's module path ``torchx.schedulers.lsf_scheduler``: the ``lsf`` backend.

The backend lives in :mod:`tether.schedulers.lsf`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.lsf.scheduler import LsfScheduler, create_scheduler

__all__ = [
    "LsfScheduler",
    "create_scheduler",
]
