"""TorchX's module path ``torchx.schedulers.ray_scheduler``: the ``ray`` backend.

The backend lives in :mod:`tether.schedulers.ray`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.ray.scheduler import RayScheduler, create_scheduler

__all__ = [
    "RayScheduler",
    "create_scheduler",
]
