"""TorchX's module path ``torchx.schedulers.docker_scheduler``: the ``local_docker`` backend.

The backend lives in :mod:`tether.schedulers.local_docker`; this module re-exports its scheduler
class and factory under TorchX's import path, so TorchX code that imports from it works
after renaming ``torchx`` to ``tether``.
"""

from tether.schedulers.local_docker.scheduler import LocalDockerScheduler, create_scheduler

DockerScheduler = LocalDockerScheduler
"""TorchX's name for :class:`LocalDockerScheduler`."""

__all__ = [
    "DockerScheduler",
    "LocalDockerScheduler",
    "create_scheduler",
]
