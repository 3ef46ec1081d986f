"""The trigger a deferred :class:`~tether.adapters.airflow.ComponentOperator` waits on.

While the job runs, the trigger streams every replica's log lines into its log, which
Airflow 3 shows in the task log, and follows the job's status: it holds one
:class:`~tether.adapters.common.AsyncJobSession`, the job session on the triggerer's event
loop, whose follower (:class:`~tether.adapters.common.HubAsyncFollower`) follows the job
through the process's watch hub: every tether trigger in one triggerer shares one view per
backend connection, with no thread per trigger, and scheduler calls run in worker threads,
so the loop never blocks on one. It fires one
event when the job reaches a final state, or cancels the job and fires a ``timed_out`` event
at the task's ``execution_timeout``.

**Log cursor.** The trigger counts the lines it has written per replica and saves that
count (the XCom ``tether_log_cursor`` of the task instance) as it goes. A trigger that runs
again for the same try (a triggerer restart, the trigger moved to another triggerer) reads
it and skips the lines already written, so lines are neither repeated nor dropped (a
triggerer killed between writing lines and saving the count repeats at most those lines).
The event carries the final count, and ``execute_complete`` copies only lines after it.

**Kills.** When a user kills the deferred task, :meth:`TetherJobTrigger.on_kill` cancels the
job if the task was stopped for good (mark failed or success); after a clear it leaves the
job running, for the next try re-attaches to it. A kill that came while no triggerer ran
the trigger reaches no ``on_kill``: a trigger that starts applies the same rule to its task
instance's state first (:meth:`TetherJobTrigger._killed_before_start`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tether.adapters.airflow.attempts import kill_cancels_job, ti_state
from tether.adapters.airflow.links import XCOM_PROGRESS, progress_value
from tether.adapters.common import (
    AsyncJobSession,
    CursorStore,
    HubAsyncFollower,
)
from tether.runner import Runner, get_runner
from tether.specs import AppState, AppStatus
from tether.tracker.progress import Progress

CLASSPATH = "tether.adapters.airflow.trigger.TetherJobTrigger"

XCOM_LOG_CURSOR = "tether_log_cursor"
"""XCom key where a deferred try keeps how many log lines of each replica it has written."""

KILLED_STATES = frozenset({"failed", "success", "skipped", "upstream_failed", "removed"})
"""Task-instance states that mean a deferred task was ended (marked) before its trigger ran."""

CANCEL_WAIT = 30.0
"""Seconds the trigger waits for a job it cancelled at the timeout to stop."""


class XComCursorStore:
    """Keeps a deferred try's log cursor in the XCom ``tether_log_cursor`` (a
    :class:`~tether.adapters.common.CursorStore`).

    Args:
        ti: The task instance: ``(dag_id, run_id, task_id, map_index)``.
        log: Where a failed save is reported (once: it is tried again at every poll).
    """

    def __init__(self, ti: tuple[str, str, str, int], log: Any) -> None:
        self.ti = ti
        self.log = log
        self._save_failed = False

    def load(self) -> Mapping[str, Any] | None:
        """The saved cursor (None: none, or no XCom channel: start from the first line)."""
        dag_id, run_id, task_id, map_index = self.ti
        try:
            from airflow.sdk.execution_time.xcom import XCom

            value = XCom.get_one(key=XCOM_LOG_CURSOR, dag_id=dag_id, task_id=task_id,
                                 run_id=run_id, map_index=map_index)
        except Exception as e:
            self.log.debug("no saved log cursor: %s", e)
            return None
        return value if isinstance(value, Mapping) else None

    def save(self, seen: Mapping[str, int]) -> bool:
        """Saves the cursor in the task's XCom.

        Args:
            seen: The counts.

        Returns:
            False when that failed (tried again later).
        """
        dag_id, run_id, task_id, map_index = self.ti
        try:
            from airflow.sdk.execution_time.xcom import XCom

            XCom.set(key=XCOM_LOG_CURSOR, value=dict(seen), dag_id=dag_id, task_id=task_id,
                     run_id=run_id, map_index=map_index)
        except Exception as e:
            if not self._save_failed:
                self.log.warning("cannot save the log cursor (trying again): %r", e)
            self._save_failed = True
            return False
        return True


def _runner_for(conn_id: str | None) -> Runner:
    """A Runner for the connection's cluster (call it in a worker thread: it may read the
    Connection through Airflow)."""
    from tether.adapters.airflow.connections import scheduler_params

    return get_runner(**scheduler_params(conn_id))


def _cancel(
    app_handle: str, conn_id: str | None = None, secret: dict[str, Any] | None = None
) -> None:
    """Cancels the job, then deletes its ``secret_env`` secret (no later try will)."""
    with _runner_for(conn_id) as runner:
        runner.cancel(app_handle)
        if secret:
            from tether.adapters.airflow.building import parse_cfg

            # every scheduler holding it (``on``); a trigger serialized before failover
            # lists names one ``scheduler``
            on = secret.get("on") or {str(secret["scheduler"]): secret.get("cfg")}
            for scheduler, cfg in on.items():
                runner.delete_secret(scheduler, str(secret["name"]),
                                     parse_cfg(runner, scheduler, cfg))


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
    """Streams a tether job's logs and fires when it finishes (or at the task's deadline).

    Args:
        app_handle: The job's handle.
        poll_interval: Seconds between status polls.
        deadline: When the task's execution_timeout ends (seconds since the epoch), if any.
        stream_logs: Write the job's log lines to the trigger's (the task's) log.
        dag_id: The task instance (for the log cursor and the state check on kill).
        run_id: The task instance.
        task_id: The task instance.
        map_index: The task instance.
        try_number: The deferred try.
        conn_id: The Airflow Connection naming the cluster (as the operator's).
        secret: The job's ``secret_env`` secret (``scheduler``, ``name``, ``cfg``), deleted
            when a kill cancels the job.
    """

    def __init__(
        self,
        app_handle: str,
        poll_interval: float = 5.0,
        deadline: float | None = None,
        stream_logs: bool = True,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: int = -1,
        try_number: int = 0,
        conn_id: str | None = None,
        secret: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.app_handle = app_handle
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline) if deadline is not None else None
        self.stream_logs = bool(stream_logs)
        self.dag_id = dag_id
        self.run_id = run_id
        self.task_id = task_id
        self.map_index = int(map_index)
        self.try_number = int(try_number)
        self.conn_id = conn_id
        self.secret = dict(secret) if secret else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and arguments that rebuild this trigger in the triggerer."""
        return CLASSPATH, {
            "app_handle": self.app_handle,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
            "stream_logs": self.stream_logs,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "try_number": self.try_number,
            "conn_id": self.conn_id,
            "secret": self.secret,
        }

    # ---- run -----------------------------------------------------------------------------
    def _has_ti(self) -> bool:
        return bool(self.dag_id and self.run_id and self.task_id)

    def _cursor_store(self) -> CursorStore | None:
        """Where the log cursor is kept: the task instance's XCom."""
        if not self._has_ti():
            return None
        ti = (str(self.dag_id), str(self.run_id), str(self.task_id), self.map_index)
        return XComCursorStore(ti, self.log)

    def _session(self) -> AsyncJobSession:
        """The job session on the triggerer's loop (logs into the trigger's, the task's, log)."""
        follower = HubAsyncFollower(lambda: _runner_for(self.conn_id), self.poll_interval)
        return AsyncJobSession(
            self.app_handle, follower, lambda: _runner_for(self.conn_id), self.log,
            self.poll_interval, self._cursor_store() if self.stream_logs else None,
            stream_logs=self.stream_logs, on_progress=self._show_progress,
        )

    def _show_progress(self, progress: Progress) -> None:
        """Writes a progress report of the job into the task log and the task's XCom
        ``tether_progress`` (in a worker thread of the triggerer)."""
        self.log.info("tether progress: %s", progress.format())
        if not self._has_ti():
            return
        from airflow.sdk.execution_time.xcom import XCom

        XCom.set(key=XCOM_PROGRESS, value=progress_value(progress), dag_id=str(self.dag_id),
                 task_id=str(self.task_id), run_id=str(self.run_id), map_index=self.map_index)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Streams logs and follows the job until it is final, then yields one event (none
        when the task was killed before the trigger started)."""
        # shielded: a kill arriving meanwhile (on_kill) must not cut the check short
        if await asyncio.shield(self._killed_before_start()):
            return
        async with self._session() as session:
            status = await session.follow(until=self.deadline)
            timed_out = status is not None and not status.is_terminal()
            while status is not None and not status.is_terminal():  # the deadline passed
                self.log.error("execution_timeout reached: cancelling tether job %s",
                               self.app_handle)
                status = await session.cancel_and_wait(CANCEL_WAIT)
            await session.write_rest()
            payload = event_payload(self.app_handle, status)
            payload["timed_out"] = timed_out
            payload["log_cursor"] = (session.cursor.to_json() if session.cursor is not None
                                     else None)
            yield TriggerEvent(payload)

    async def _killed_before_start(self) -> bool:
        """Applies the kill rule when the task stopped being deferred before this trigger ran.

        A deferred task marked failed or cleared while no triggerer ran this trigger never
        got an ``on_kill``; the triggerer still loads the trigger once before it drops it.
        So the trigger looks at its task instance first: a final state cancels the job (as
        ``on_kill`` would), a cleared task leaves it to the next try's re-attach. A state
        that cannot be read changes nothing: the trigger follows the job as usual.

        Returns:
            True when the task is no longer deferred (the trigger has nothing to follow).
        """
        if not self._has_ti():
            return False
        state = await asyncio.to_thread(self._ti_state)
        if state not in KILLED_STATES:
            # deferred, unreadable, or not final (a cleared task's next try re-attaches to the
            # job; `dag.test()` runs the trigger while its task reads SCHEDULED): follow it
            return False
        cancel, reason = kill_cancels_job(state, None, self.try_number, deferred=True)
        if not cancel:
            self.log.info("the task was killed before its trigger ran: leaving tether job %s "
                          "running (%s)", self.app_handle, reason)
            return True
        self.log.info("the task was killed before its trigger ran: cancelling tether job %s "
                      "(%s)", self.app_handle, reason)
        await asyncio.to_thread(_cancel, self.app_handle, self.conn_id, self.secret)
        return True

    async def on_kill(self) -> None:
        """A user killed the deferred task: cancels the job unless a new try takes it over."""
        state = await asyncio.to_thread(self._ti_state)
        cancel, reason = kill_cancels_job(state, None, self.try_number, deferred=True)
        if not cancel:
            self.log.info("the task was killed: leaving tether job %s running (%s)",
                          self.app_handle, reason)
            return
        self.log.info("the task was killed: cancelling tether job %s (%s)",
                      self.app_handle, reason)
        await asyncio.to_thread(_cancel, self.app_handle, self.conn_id, self.secret)

    def _ti_state(self) -> str | None:
        if not self._has_ti():
            return "unknown"
        return ti_state(str(self.dag_id), str(self.run_id), str(self.task_id), self.map_index)
