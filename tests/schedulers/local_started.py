"""Waiting for a ``local_cwd`` app's replicas to be recorded started.

``LocalScheduler.schedule`` returns once the app's supervisor claimed it, before the replicas
start; a test that needs their pids (or a running app) waits for the supervisor's
confirmation record first.
"""

from __future__ import annotations

import time

from tether.schedulers.local.records import AppRecord
from tether.schedulers.local.state import StateStore
from tether.specs import AppState


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
