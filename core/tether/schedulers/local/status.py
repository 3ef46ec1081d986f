"""Local replica processes -> :class:`~tether.specs.AppState`: the one table.

The local backend's native states are facts about processes the supervisor owns: a process
that ended with an exit code, after a stop the supervisor asked for (a restart, a cancel,
another replica's failure) or on its own, and a supervisor that is gone. :data:`STOP_STATE`
and :func:`exited_state` map a replica's end to its state; :func:`app_final_state` gives the
app's state from its replicas; :func:`orphaned_state` says what a replica whose supervisor died
becomes. The supervisor (:mod:`tether.schedulers.local.supervisor`) and the readers that find
it gone (:mod:`tether.schedulers.local.procs`) record what these return; ``describe`` reads
the recorded states.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.specs import AppState
from tether.specs.failures import Failure, FailureCause

RESTART = "restart"
"""The supervisor stopped the replica to start it again (a reconciled retry)."""
FAIL = "fail"
"""The supervisor stopped the replica because another replica failed."""
CANCEL = "cancel"
"""The supervisor stopped the replica because the app was cancelled."""

STOP_RANK: dict[str, int] = {RESTART: 0, FAIL: 1, CANCEL: 2}
"""Which stop reason wins when a replica is stopped twice (a cancel overrides a restart)."""

STOP_STATE: dict[str, tuple[AppState, str]] = {
    RESTART: (AppState.PENDING, "stopped for a restart"),
    FAIL: (AppState.CANCELLED, "stopped because another replica failed"),
    CANCEL: (AppState.CANCELLED, "cancelled"),
}
"""The state and message of a replica that ended after the supervisor stopped it."""


def exited_state(returncode: int, stop_reason: str | None) -> tuple[AppState, str]:
    """The state of a replica whose process ended.

    A replica stopped for a restart is PENDING whatever its exit code; otherwise exit code 0
    is SUCCEEDED (even after a stop: it finished its work), a stopped replica is what
    :data:`STOP_STATE` says, and any other exit is FAILED (the caller writes the message:
    the exit code or signal and the log's tail).

    Args:
        returncode: The exit code (negative: killed by that signal).
        stop_reason: Why the supervisor stopped it (:data:`STOP_STATE`'s keys), or None.

    Returns:
        The state and its message ("" for SUCCEEDED and FAILED).
    """
    if stop_reason == RESTART:
        return STOP_STATE[RESTART]
    if returncode == 0:
        return AppState.SUCCEEDED, ""
    if stop_reason in STOP_STATE:
        return STOP_STATE[stop_reason]
    return AppState.FAILED, ""


def orphaned_state(cancelled: bool) -> AppState:
    """The state of an unfinished replica whose supervisor is gone (its processes are
    stopped by the reader that found out).

    Args:
        cancelled: Whether the reader is cancelling the app.

    Returns:
        CANCELLED for a cancel, else FAILED (the exit status is unknown).
    """
    return AppState.CANCELLED if cancelled else AppState.FAILED


def app_final_state(
    replicas: Iterable[AppState], cancelled: bool = False, failing: bool = False
) -> AppState:
    """The state of an app none of whose replicas runs any more.

    Args:
        replicas: The replicas' states.
        cancelled: The app was cancelled.
        failing: The app was stopped because a replica failed (its retries were exhausted).

    Returns:
        CANCELLED, FAILED, or SUCCEEDED when every replica succeeded.
    """
    if cancelled:
        return AppState.CANCELLED
    if failing:
        return AppState.FAILED
    if all(s == AppState.SUCCEEDED for s in replicas):
        return AppState.SUCCEEDED
    return AppState.FAILED


def replica_failure(state: AppState, exit_code: int | None, msg: str = "") -> Failure | None:
    """Why a local replica failed: its program's exit (``APPLICATION``), or ``UNKNOWN`` when
    its exit status was lost with its supervisor.

    A process killed by a signal (a negative code) is the application's too: ``local_cwd``
    puts no memory limit on a replica, and the kernel's OOM killer's ``SIGKILL`` cannot be
    told apart from any other ``SIGKILL`` after the fact, so it is never reported as
    ``OOM_KILLED``.

    Args:
        state: The replica's state.
        exit_code: Its exit code (negative: the signal), None when unknown.
        msg: Its message (the native reason).

    Returns:
        The failure; None unless the state is FAILED.
    """
    if state != AppState.FAILED:
        return None
    reason = msg.splitlines()[0] if msg else ""
    if exit_code is None:
        return Failure(FailureCause.UNKNOWN, reason)
    return Failure(FailureCause.APPLICATION, reason, exit_code)
