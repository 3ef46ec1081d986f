"""The trigger a deferred :class:`~tether.adapters.airflow.ComponentOperator` waits on.

It polls the job's status through the Runner in a worker thread (``asyncio.to_thread``), so
the triggerer's event loop never blocks on a scheduler call, and fires one event when the job
reaches a final state. It keeps no state of its own: running it again (a triggerer restart, a
trigger moved to another triggerer, a second run after the event) polls the same job and fires
the same event. When a user kills the deferred task (mark failed, clear, mark success),
:meth:`TetherJobTrigger.on_kill` cancels the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tether.runner import Runner, get_runner
from tether.specs import AppState, AppStatus

CLASSPATH = "tether.adapters.airflow.trigger.TetherJobTrigger"


def _cancel(app_handle: str) -> None:
    with get_runner() as runner:
        runner.cancel(app_handle)


def event_payload(app_handle: str, status: AppStatus | None) -> dict[str, Any]:
    """The trigger event's payload for a status (JSON-serializable).

    Args:
        app_handle: The job.
        status: Its status (None when the scheduler no longer knows it).

    Returns:
        ``app_handle``, ``state`` (a name), ``msg`` and ``ui_url``.
    """
    if status is None:
        return {
            "app_handle": app_handle,
            "state": AppState.UNKNOWN.name,
            "msg": "the scheduler no longer knows the job",
            "ui_url": None,
        }
    return {
        "app_handle": app_handle,
        "state": status.state.name,
        "msg": status.msg,
        "ui_url": status.ui_url,
    }


class TetherJobTrigger(BaseTrigger):
    """Fires when a tether job finishes.

    Args:
        app_handle: The job's handle.
        poll_interval: Seconds between status polls.
    """

    def __init__(self, app_handle: str, poll_interval: float = 5.0) -> None:
        super().__init__()
        self.app_handle = app_handle
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and arguments that rebuild this trigger in the triggerer."""
        return CLASSPATH, {"app_handle": self.app_handle, "poll_interval": self.poll_interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Polls the job until it is final, then yields one event (see :func:`event_payload`)."""
        runners: list[Runner] = []  # one per run, made and used in worker threads only

        def poll() -> AppStatus | None:
            if not runners:
                runners.append(get_runner())
            runners[0].reconcile(self.app_handle)  # retries the engine lacks (idempotent)
            return runners[0].status(self.app_handle)

        last: AppState | None = None
        try:
            while True:
                status = await asyncio.to_thread(poll)
                if status is None or status.is_terminal():
                    yield TriggerEvent(event_payload(self.app_handle, status))
                    return
                if status.state != last:
                    self.log.info("tether job %s is %s", self.app_handle, status.state.name)
                    last = status.state
                await asyncio.sleep(self.poll_interval)
        finally:
            for runner in runners:
                runner.close()

    async def on_kill(self) -> None:
        """Cancels the job: the user killed the deferred task (mark failed, clear...)."""
        self.log.info("the task was killed: cancelling tether job %s", self.app_handle)
        await asyncio.to_thread(_cancel, self.app_handle)
