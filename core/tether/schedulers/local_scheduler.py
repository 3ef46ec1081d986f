"""TorchX's module path ``torchx.schedulers.local_scheduler``: the ``local_cwd`` backend.

The backend lives in :mod:`tether.schedulers.local`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler

__all__ = [
    "LocalScheduler",
    "create_scheduler",
]
