"""The one table from Docker container states to :class:`~tether.specs.AppState`, and the
rules that fold replicas into an app state.

A container's ``State.Status`` (Docker and podman's Docker API) maps through
:data:`CONTAINER_STATE`, except ``exited``, whose meaning depends on the exit code and on the
restart policy (:func:`replica_state`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.specs import AppState

CONTAINER_STATE: dict[str, AppState] = {
    "created": AppState.PENDING,
    "configured": AppState.PENDING,  # podman: created, not yet initialised
    "initialized": AppState.PENDING,  # podman
    "restarting": AppState.PENDING,  # the restart policy is starting it again
    "running": AppState.RUNNING,
    "paused": AppState.RUNNING,
    "stopping": AppState.RUNNING,  # podman
    "removing": AppState.RUNNING,
    "dead": AppState.FAILED,
}
"""Native container state -> AppState (``exited`` is decided by :func:`replica_state`)."""
EXITED = frozenset({"exited", "stopped"})
"""The states of a container whose process ended (podman reports ``stopped``, with the exit
code, between the process's exit and its cleanup; then ``exited``)."""


@dataclass
class ReplicaView:
    """What describe needs of one container.

    Attributes:
        role: The role's name.
        replica_id: The replica's index.
        hostname: The container's hostname.
        state: Its AppState.
        exit_code: Exit code once exited.
        restarts: How often the engine restarted it.
        msg: The native state and reason.
    """

    role: str
    replica_id: int
    hostname: str
    state: AppState
    exit_code: int | None
    restarts: int
    msg: str


def replica_state(
    native: Mapping[str, Any], max_retries: int, restarts: int = 0
) -> tuple[AppState, str]:
    """The AppState of one container from its inspected ``State``.

    Args:
        native: ``inspect()["State"]`` (``Status``, ``ExitCode``, ``Error``, ``OOMKilled``...).
        max_retries: The replica's restart budget (``on-failure`` maximum retry count).
        restarts: How often the engine restarted it so far.

    Returns:
        The state and a message with the native status and reason.
    """
    status = str(native.get("Status", "")).lower()
    if status in EXITED:
        status = "exited"
    code = native.get("ExitCode")
    err = str(native.get("Error") or "")
    oom = bool(native.get("OOMKilled"))
    detail = f"container {status}"
    if status == "exited":
        detail += f" with exit code {code}"
    if oom:
        detail += " (out of memory)"
    if err:
        detail += f": {err}"
    if status == "exited":
        if code == 0:
            return AppState.SUCCEEDED, detail
        if restarts < max_retries:  # the restart policy starts it again
            return AppState.PENDING, f"{detail}; restarting ({restarts}/{max_retries})"
        return AppState.FAILED, detail
    return CONTAINER_STATE.get(status, AppState.UNKNOWN), detail


def app_state(replicas: Iterable[ReplicaView], cancelled: bool, failure: str | None) -> AppState:
    """Folds the replicas into the app's state.

    Args:
        replicas: Every replica.
        cancelled: The app was cancelled.
        failure: Why the app failed before any container ran (a missing image), if it did.

    Returns:
        FAILED when the app failed to start, CANCELLED when cancelled (cancel records it only
        for an unfinished app, so replicas that exit 0 on SIGTERM stay CANCELLED), FAILED when
        a replica failed, SUCCEEDED when all succeeded, RUNNING while any runs, else PENDING.
    """
    reps = list(replicas)
    if failure is not None:
        return AppState.FAILED
    states = [r.state for r in reps]
    if cancelled:  # recorded only for an app not finished yet: a clean exit on SIGTERM too
        return AppState.CANCELLED
    if states and all(s == AppState.SUCCEEDED for s in states):
        return AppState.SUCCEEDED
    if AppState.FAILED in states:
        return AppState.FAILED
    if AppState.UNKNOWN in states:
        return AppState.UNKNOWN
    if AppState.RUNNING in states:
        return AppState.RUNNING
    return AppState.PENDING
