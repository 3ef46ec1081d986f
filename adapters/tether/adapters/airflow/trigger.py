"""The trigger a deferred :class:`~tether.adapters.airflow.ComponentOperator` waits on.

While the job runs, the trigger streams every replica's log lines into its log, which
Airflow 3 shows in the task log, and polls the job's status through the Runner in worker
threads (``asyncio.to_thread``), so the triggerer's event loop never blocks on a scheduler
call. It fires one event when the job reaches a final state, or cancels the job and fires a
``timed_out`` event at the task's ``execution_timeout``.

**Log cursor.** The trigger counts the lines it has written per replica and saves that
count (the XCom ``tether_log_cursor`` of the task instance) as it goes. A trigger that runs
again for the same try (a triggerer restart, the trigger moved to another triggerer) reads
it and skips the lines already written, so lines are neither repeated nor dropped (a
triggerer killed between writing lines and saving the count repeats at most those lines).
The event carries the final count, and ``execute_complete`` copies only lines after it.

**Kills.** When a user kills the deferred task, :meth:`TetherJobTrigger.on_kill` cancels the
job if the task was stopped for good (mark failed or success); after a clear it leaves the
job running, for the next try re-attaches to it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tether.adapters.airflow.attempts import kill_cancels_job, ti_state
from tether.runner import Runner, fan_in, get_runner
from tether.specs import AppState, AppStatus

CLASSPATH = "tether.adapters.airflow.trigger.TetherJobTrigger"

XCOM_LOG_CURSOR = "tether_log_cursor"
"""XCom key where a deferred try keeps how many log lines of each replica it has written."""

CANCEL_WAIT = 30.0
"""Seconds the trigger waits for a job it cancelled at the timeout to stop."""


@dataclass
class LogCursor:
    """How many lines of each replica (``role/replica``) were written to the task log."""

    seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any) -> LogCursor:
        """Reads a saved cursor (an empty one for anything else).

        Args:
            value: A mapping of ``role/replica`` to a line count, or None.

        Returns:
            The cursor.
        """
        if not isinstance(value, Mapping):
            return cls()
        out: dict[str, int] = {}
        for k, v in value.items():
            try:
                out[str(k)] = max(int(v), 0)
            except (TypeError, ValueError):
                continue
        return cls(out)

    def to_json(self) -> dict[str, int]:
        """The JSON form."""
        return dict(self.seen)

    def new_lines(self, runner: Runner, app_handle: str, follow: bool) -> Iterator[str]:
        """The job's lines not written yet (formatted ``role/replica line``), counting them.

        Args:
            runner: The runner.
            app_handle: The job.
            follow: Follow the logs until the job ends (False: what is there now).

        Yields:
            Each new line, after the cursor moved past it.
        """
        for replica, count, text in self.unseen(runner, app_handle, follow):
            self.seen[replica] = count
            yield text

    def unseen(
        self, runner: Runner, app_handle: str, follow: bool
    ) -> Iterator[tuple[str, int, str]]:
        """The lines past this cursor, which it does not move (see :meth:`new_lines`).

        Args:
            runner: The runner.
            app_handle: The job.
            follow: Follow the logs until the job ends (False: what is there now).

        Yields:
            ``(role/replica, the line's number in that replica's log, the formatted line)``.
        """
        counts: dict[str, int] = {}
        for line in fan_in(runner, app_handle, should_tail=follow):
            replica = f"{line.role}/{line.replica}"
            counts[replica] = counts.get(replica, 0) + 1
            if counts[replica] > self.seen.get(replica, 0):
                yield replica, counts[replica], line.format()


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

            scheduler = str(secret["scheduler"])
            runner.delete_secret(scheduler, str(secret["name"]),
                                 parse_cfg(runner, scheduler, secret.get("cfg")))


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
        self._cursor_save_failed = False

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

    # ---- the log cursor, kept in an XCom of the task instance ---------------------------
    def _has_ti(self) -> bool:
        return bool(self.dag_id and self.run_id and self.task_id)

    def _load_cursor(self) -> LogCursor:
        if not self._has_ti():
            return LogCursor()
        try:
            from airflow.sdk.execution_time.xcom import XCom

            value = XCom.get_one(
                key=XCOM_LOG_CURSOR, dag_id=self.dag_id, task_id=self.task_id,
                run_id=self.run_id, map_index=self.map_index,
            )
        except Exception as e:  # no XCom channel: start from the first line
            self.log.debug("no saved log cursor: %s", e)
            return LogCursor()
        return LogCursor.from_json(value)

    def _save_cursor(self, cursor: LogCursor) -> bool:
        """Saves the cursor in the task's XCom; False when that failed (tried again later)."""
        if not self._has_ti():
            return True
        try:
            from airflow.sdk.execution_time.xcom import XCom

            XCom.set(
                key=XCOM_LOG_CURSOR, value=cursor.to_json(), dag_id=str(self.dag_id),
                task_id=str(self.task_id), run_id=str(self.run_id), map_index=self.map_index,
            )
        except Exception as e:
            if not self._cursor_save_failed:  # once: it is tried again at every poll
                self.log.warning("cannot save the log cursor (trying again): %r", e)
            self._cursor_save_failed = True
            return False
        return True

    # ---- run -----------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Streams logs and polls the job until it is final, then yields one event."""
        runners: list[Runner] = []  # made and used in worker threads only
        lock = threading.Lock()

        def runner() -> Runner:
            with lock:
                if not runners:
                    runners.append(_runner_for(self.conn_id))
                return runners[0]

        def poll() -> AppStatus | None:
            r = runner()
            r.reconcile(self.app_handle)  # retries the engine lacks (idempotent)
            return r.status(self.app_handle)

        loop = asyncio.get_running_loop()
        # (role/replica, line number, line), or a note of the pump's (no number), or its end
        lines: asyncio.Queue[tuple[str, int, str] | None] = asyncio.Queue()
        stop = threading.Event()
        # the lines written to the task log: moved here, in the event loop, as each line is
        # written (the pump reads ahead from a copy), so a saved cursor never counts a line
        # that is not in the task log yet, nor misses one that is
        cursor = await asyncio.to_thread(self._load_cursor) if self.stream_logs else LogCursor()
        saved: dict[str, int] = cursor.to_json()
        pump: threading.Thread | None = None
        if self.stream_logs:
            def post(item: tuple[str, int, str] | None) -> bool:
                try:
                    loop.call_soon_threadsafe(lines.put_nowait, item)
                except RuntimeError:  # the loop is gone: the trigger ended
                    return False
                return True

            reader = LogCursor(cursor.to_json())  # the pump's own copy, never moved

            def pump_lines() -> None:
                # a trigger that stops while the job runs leaves this thread until the next
                # line (or the job's end): the log readers block on the job's files or API
                with _runner_for(self.conn_id) as r:
                    try:
                        for item in reader.unseen(r, self.app_handle, follow=True):
                            if stop.is_set() or not post(item):
                                return
                    except Exception as e:
                        post(("", 0, f"[tether] cannot stream the job's logs: {e}"))
                    finally:
                        post(None)

            pump = threading.Thread(target=pump_lines, daemon=True,
                                    name=f"tether-trigger-logs-{self.app_handle}")
            pump.start()

        pump_done = pump is None

        async def drain(timeout: float) -> None:
            """Writes the lines that arrive within ``timeout`` seconds, then saves the cursor."""
            nonlocal pump_done, saved
            end = time.monotonic() + timeout
            while not pump_done:
                left = end - time.monotonic()
                # asyncio.wait, not wait_for: wait_for can swallow the trigger's cancellation
                # on Python 3.11 when the line arrives at the same moment
                getter = asyncio.ensure_future(lines.get())
                try:
                    done, _ = await asyncio.wait({getter}, timeout=max(left, 0.0))
                finally:
                    if not getter.done():
                        getter.cancel()
                if not done:
                    break
                item = getter.result()
                if item is None:
                    pump_done = True
                    break
                replica, count, text = item
                self.log.info("%s", text)
                if count:
                    cursor.seen[replica] = count
            if cursor.seen != saved:
                snapshot = LogCursor(dict(cursor.seen))
                if await asyncio.to_thread(self._save_cursor, snapshot):
                    saved = snapshot.to_json()  # else the next drain tries again

        last: AppState | None = None
        timed_out = False
        try:
            while True:
                status = await asyncio.to_thread(poll)
                if status is not None and not status.is_terminal() and self._past_deadline():
                    self.log.error("execution_timeout reached: cancelling tether job %s",
                                   self.app_handle)
                    timed_out = True
                    await asyncio.to_thread(_cancel, self.app_handle, self.conn_id)
                    status = await asyncio.to_thread(
                        lambda: runner().wait(self.app_handle, wait_interval=0.2,
                                              timeout=CANCEL_WAIT)
                    )
                if status is None or status.is_terminal():
                    # the last lines: the pump ends when every replica's log is complete
                    end = time.monotonic() + 10.0
                    while not pump_done and time.monotonic() < end:
                        await drain(end - time.monotonic())
                    await drain(0.0)
                    payload = event_payload(self.app_handle, status)
                    payload["timed_out"] = timed_out
                    payload["log_cursor"] = cursor.to_json() if self.stream_logs else None
                    yield TriggerEvent(payload)
                    return
                if status.state != last:
                    self.log.info("tether job %s is %s", self.app_handle, status.state.name)
                    last = status.state
                if pump_done:
                    await asyncio.sleep(self._sleep_time())
                else:
                    await drain(self._sleep_time())
        finally:
            stop.set()
            for r in runners:
                r.close()

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def _sleep_time(self) -> float:
        if self.deadline is None:
            return self.poll_interval
        return max(min(self.poll_interval, self.deadline - time.time()), 0.0)

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
