"""What a killed try does with its job: cancel it only when the task was stopped.

Airflow calls ``on_kill`` on SIGTERM (mark failed or success, clear, worker shutdown) and after
an execution timeout. :func:`cancel_on_kill` reads, with a bounded wait, who owns the job (the
ledger) and why the task stops (the task instance's state), lets
:func:`~tether.adapters.airflow.attempts.kill_cancels_job` decide, and cancels the job (and
deletes its ``secret_env`` secret) on a helper thread with a fresh runner. A cleared task
leaves the job running for the next try to re-attach to.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tether.adapters.airflow.attempts import Ledger, kill_cancels_job, ti_state
from tether.adapters.airflow.lifecycle import TryLifecycle

KILL_READ_TIMEOUT = 5.0
"""Seconds ``on_kill`` waits for the task instance's state and the job's owner."""


def cancel_on_kill(lifecycle: TryLifecycle, app_handle: str) -> None:
    """Cancels the job when the killed try owns it and the task was stopped, not cleared.

    Args:
        lifecycle: The killed try's lifecycle.
        app_handle: Its job.
    """
    log = lifecycle.log
    facts = _read_facts(lifecycle)
    ledger: Ledger | None = facts.get("ledger")
    owner = ledger.owner if ledger and ledger.app_handle == app_handle else None
    state: str | None = facts.get("state", "unknown")
    cancel, reason = kill_cancels_job(state, owner, lifecycle.try_number)
    if not cancel:
        log.info("task killed: leaving tether job %s running (%s)", app_handle, reason)
        return
    log.info("task killed: cancelling tether job %s (%s)", app_handle, reason)
    mine = ledger if ledger is not None and ledger.app_handle == app_handle else None
    # A helper thread with a fresh runner: the signal may have interrupted the main thread
    # inside a call of the job's own runner.
    t = threading.Thread(target=_cancel, args=(lifecycle, app_handle, mine),
                         name="tether-cancel", daemon=True)
    t.start()
    t.join(timeout=60)


def _read_facts(lifecycle: TryLifecycle) -> dict[str, Any]:
    """Who owns the job and why the task stops, from Airflow's supervisor channel.

    Read in a helper thread with a bounded wait: the signal may have interrupted this thread
    inside a call on that channel, which holds its lock; then the facts stay unknown.
    """
    facts: dict[str, Any] = {}

    def read() -> None:
        try:
            facts["ledger"] = lifecycle.read_ledger()
        except Exception as e:
            lifecycle.log.warning("cannot read the job's owner: %s", e)
        for _ in range(3):  # a read can fail while the channel is busy: try again
            facts["state"] = ti_state(*lifecycle.ti_ids)
            if facts["state"] != "unknown":
                break
            time.sleep(0.2)

    reader = threading.Thread(target=read, name="tether-kill-facts", daemon=True)
    reader.start()
    reader.join(timeout=KILL_READ_TIMEOUT)
    return facts


def _cancel(lifecycle: TryLifecycle, app_handle: str, ledger: Ledger | None) -> None:
    with lifecycle.runner() as runner:
        runner.cancel(app_handle)
        if ledger is not None and ledger.extra.get("secret"):
            lifecycle.cleanup_secret(runner, ledger)  # no later try may come to do it
