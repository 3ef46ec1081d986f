"""TorchX's module path ``torchx.schedulers.kubernetes_scheduler``: the ``kubernetes`` backend.

The backend lives in :mod:`tether.schedulers.kubernetes`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.kubernetes.scheduler import KubernetesScheduler, create_scheduler

__all__ = [
    "KubernetesScheduler",
    "create_scheduler",
]
