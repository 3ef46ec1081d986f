"""A thin wrapper over the ``docker`` package (imported only here, when first used).

Works with Docker and with podman's Docker-compatible API (``podman system service``).
Shared by the backends that talk to an engine: ``local_docker`` runs its containers
through it, ``kubernetes`` builds and pushes workspace images with it (so neither backend
imports the other).
"""

from __future__ import annotations

import os
from typing import Any

from tether.errors import BackendError

ENV_DOCKER_HOST = "DOCKER_HOST"
NO_ENGINE_HINT = (
    "local_docker needs a Docker Engine API: start Docker, or podman's compatible socket with "
    "`podman system service --time=0 unix:///tmp/podman.sock &` and "
    "`export DOCKER_HOST=unix:///tmp/podman.sock`"
)


class DockerUnavailableError(BackendError):
    """No Docker Engine API answers (the message names ``DOCKER_HOST`` and how to start one)."""

    backend, kind = "docker", "connection"


def errors() -> Any:
    """The ``docker.errors`` module."""
    import docker.errors

    return docker.errors


def connect(docker_host: str | None = None, timeout: int = 120) -> Any:
    """A low-level ``docker.APIClient`` for ``docker_host`` (default ``$DOCKER_HOST``).

    Args:
        docker_host: The engine's address (``unix://...``, ``tcp://...``).
        timeout: HTTP timeout in seconds.

    Returns:
        The client, checked with a ping.

    Raises:
        DockerUnavailableError: When the package is missing or nothing answers.
    """
    try:
        import docker
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise DockerUnavailableError(
            "local_docker needs the `docker` package: pip install 'tether[docker]'"
        ) from e
    where = docker_host or os.environ.get(ENV_DOCKER_HOST) or "the default socket"
    try:
        if docker_host:
            api = docker.APIClient(base_url=docker_host, timeout=timeout, version="auto")
        else:
            api = docker.from_env(timeout=timeout).api
        api.ping()
    except Exception as e:  # every failure means the same to the user
        raise DockerUnavailableError(
            f"no Docker Engine API at {where} ({ENV_DOCKER_HOST}="
            f"{os.environ.get(ENV_DOCKER_HOST, '<unset>')}): {e}. {NO_ENGINE_HINT}"
        ) from e
    return api


def engine_message(e: BaseException) -> str:
    """The engine's own explanation of a failed request."""
    explanation = getattr(e, "explanation", None)
    if explanation:
        return explanation.decode() if isinstance(explanation, bytes) else str(explanation)
    return str(e)
