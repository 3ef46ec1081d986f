"""Waiting for a ``local_cwd`` app's replicas to be recorded started (or the app RUNNING).

``LocalScheduler.schedule`` returns once the app's supervisor claimed it, before the replicas
start; a test that needs their pids (or a running app) waits for the supervisor's
confirmation record first.
"""

from __future__ import annotations

import time

from tether.runner import Runner
from tether.schedulers.local.records import AppRecord
from tether.schedulers.local.state import StateStore
from tether.specs import AppState, AppStatus


def wait_started(store: StateStore, app_id: str, timeout: float = 60.0) -> AppRecord:
    """The app's record once its supervisor recorded the replicas started (or the app ended).

    Args:
        store: The scheduler's state store.
        app_id: The app.
        timeout: The most seconds to wait.

    Returns:
        The record.
    """
    deadline = time.monotonic() + timeout
    while True:
        rec = store.load(app_id)
        assert rec is not None, f"no record of app {app_id}"
        if rec.app_state != AppState.SUBMITTED and not any(r.launching for r in rec.replicas):
            return rec
        assert time.monotonic() < deadline, f"the replicas of {app_id} were not started: {rec}"
        time.sleep(0.01)


def wait_running(runner: Runner, app_handle: str, timeout: float = 60.0) -> AppStatus:
    """The app's status once it reads RUNNING (a ``local_cwd`` app reads SUBMITTED until its
    supervisor confirmed the start).

    Args:
        runner: The runner to ask.
        app_handle: The app.
        timeout: The most seconds to wait.

    Returns:
        The status.
    """
    deadline = time.monotonic() + timeout
    while (status := runner.status(app_handle)) is None or status.state != AppState.RUNNING:
        assert time.monotonic() < deadline, f"{app_handle} is not RUNNING: {status}"
        time.sleep(0.01)
    return status
