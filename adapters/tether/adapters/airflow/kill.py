"""What a killed try does with its job: cancel it only when the task was stopped.

Airflow calls ``on_kill`` on SIGTERM (mark failed or success, clear, worker shutdown) and after
an execution timeout. :class:`KillHandling` reads, with a bounded wait, who owns the job (the
ledger) and why the task stops (the task instance's state), lets
:func:`~tether.adapters.airflow.attempts.kill_cancels_job` decide, and cancels the job (and
deletes its ``secret_env`` secret) on a helper thread with a fresh runner. A cleared task
leaves the job running for the next try to re-attach to. The operator inherits it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tether.adapters.airflow.attempts import Ledger, kill_cancels_job, ti_state
from tether.adapters.airflow.lifecycle import JobLifecycle
from tether.adapters.common import ComponentJob

KILL_READ_TIMEOUT = 5.0
"""Seconds ``on_kill`` waits for the task instance's state and the job's owner."""


class KillHandling(JobLifecycle):
    """Cancels the job of a killed try when that try owns it (a mixin of the operator)."""

    _job: ComponentJob | None
    _stopped: bool

    def _cancel_on_kill(self) -> None:
        """Cancels the job when the killed try owns it and the task was stopped, not cleared."""
        job = self._job
        if job is None or job.app_handle is None or self._stopped:
            return
        handle = job.app_handle
        ids = self._ti_ids
        # Who owns the job and why the task stops come from Airflow's supervisor channel. Read
        # in a helper thread with a bounded wait: the signal may have interrupted this thread
        # inside a call on that channel, which holds its lock; then the facts stay unknown.
        facts: dict[str, Any] = {}

        def read() -> None:
            try:
                found = self._read_ledger()
                facts["ledger"] = found
            except Exception as e:
                self.log.warning("cannot read the job's owner: %s", e)
            for _ in range(3):  # a read can fail while the channel is busy: try again
                if ids is None:
                    break
                facts["state"] = ti_state(*ids[:4])
                if facts["state"] != "unknown":
                    break
                time.sleep(0.2)

        reader = threading.Thread(target=read, name="tether-kill-facts", daemon=True)
        reader.start()
        reader.join(timeout=KILL_READ_TIMEOUT)
        ledger: Ledger | None = facts.get("ledger")
        owner = ledger.owner if ledger and ledger.app_handle == handle else None
        state: str | None = facts.get("state", "unknown")
        cancel, reason = kill_cancels_job(state, owner, ids[4] if ids else 0)
        if not cancel:
            self.log.info("task killed: leaving tether job %s running (%s)", handle, reason)
            return
        self.log.info("task killed: cancelling tether job %s (%s)", handle, reason)

        # A helper thread with a fresh runner: the signal may have interrupted the main thread
        # inside a call of the job's own runner.
        def stop() -> None:
            with self._runner() as r:
                r.cancel(handle)
                if ledger is not None and ledger.app_handle == handle and ledger.extra.get(
                    "secret"
                ):
                    self._cleanup_secret(r, ledger)  # no later try may come to do it

        t = threading.Thread(target=stop, name="tether-cancel", daemon=True)
        t.start()
        t.join(timeout=60)
