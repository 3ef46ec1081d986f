"""Every log line of a tether job into the Prefect API, in order, and a cursor for re-attaching.

Prefect's own API log handler queues records for a background worker that sends them in
batches and drains at interpreter exit; a job printing thousands of lines overruns it (lines
are dropped and the process lingers at exit while the backlog drains). A component task
therefore ships its job's lines itself with :class:`LogShipper`:

* lines go straight to ``POST /logs/`` in batches, from the thread that reads the job's logs,
  so that thread waits while a batch is sent: back-pressure reaches the log readers, whose
  queue is bounded (:func:`tether.runner.fan_in`), and nothing is buffered without bound;
* timestamps are strictly increasing, so Prefect (which orders logs by timestamp) shows the
  lines in the order the job wrote them;
* :meth:`LogShipper.close` sends the last batch before the task returns: no background
  thread is left to drain after the flow ends;
* the lines are also echoed to the task run's logger with ``send_to_api=False`` (the
  console shows them, the API receives them once).

The cursor (a :class:`~tether.adapters.common.LogCursor`: lines delivered per
``role/replica``) moves as each batch is sent and is kept in a Prefect variable named after
the job key (:class:`VariableCursorStore`), saved every few seconds and at the end. A rerun
that re-attaches to the job reads it and skips what an earlier attempt already delivered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from tether.adapters.common import CursorStore, LogCursor

log = logging.getLogger(__name__)

BATCH_LINES = 1000
"""Most lines in one request."""

BATCH_BYTES = 512 * 1024
"""Most message bytes in one request (Prefect's API takes a few MB per request)."""

BATCH_SECONDS = 0.5
"""A partial batch is sent once its oldest line is this old (when the next line arrives)."""

CURSOR_SECONDS = 5.0
"""How often the cursor variable is updated while the job runs."""

MAX_LINE_CHARS = 64 * 1024
"""Longer lines are cut (Prefect drops log messages over its size limit)."""

SEND_ATTEMPTS = 4
"""Tries per batch before the task fails (the job keeps running; a retry resumes)."""

LOGGER_NAME = "prefect.task_runs"
"""The logger name the shipped lines carry (the task run logger's)."""


def cursor_name(job_key: str) -> str:
    """The Prefect variable holding the log cursor of a job.

    Args:
        job_key: The job identity (letters, digits, dashes).

    Returns:
        e.g. ``tether-log-cursor-prefect-3f2a...``.
    """
    return f"tether-log-cursor-{job_key}"[:255]


class VariableCursorStore:
    """Keeps a job's log cursor in a Prefect variable (a :class:`CursorStore`).

    The value records the job it belongs to: a cursor of another job with the same key (one
    that failed and was resubmitted) does not count.

    Args:
        client: A sync Prefect client (not closed here).
        job_key: The job identity (names the variable).
        app_handle: The job the cursor belongs to.
    """

    def __init__(self, client: Any, job_key: str, app_handle: str) -> None:
        self.client = client
        self.name = cursor_name(job_key)
        self.app_handle = app_handle
        self._exists: bool | None = None  # unknown until read or written

    def load(self) -> Mapping[str, Any] | None:
        """The lines this job's earlier followers delivered, by ``role/replica``."""
        var = self.client.read_variable_by_name(self.name)
        self._exists = var is not None
        value = getattr(var, "value", None)
        if not isinstance(value, dict) or value.get("app") != self.app_handle:
            return None
        lines = value.get("lines")
        return lines if isinstance(lines, dict) else None

    def save(self, seen: Mapping[str, int]) -> bool:
        """Creates or updates the variable.

        Args:
            seen: The counts.

        Returns:
            Whether it was saved (a stale cursor only repeats lines on a later re-attach).
        """
        from prefect.client.schemas.actions import VariableCreate, VariableUpdate
        from prefect.exceptions import ObjectAlreadyExists

        value: dict[str, Any] = {"app": self.app_handle, "lines": dict(seen)}
        try:
            if not self._exists:
                try:
                    self.client.create_variable(
                        VariableCreate(name=self.name, value=value, tags=["tether"])
                    )
                    self._exists = True
                    return True
                except ObjectAlreadyExists:
                    self._exists = True
            self.client.update_variable(VariableUpdate(name=self.name, value=value))
        except Exception as e:
            log.warning("cannot save the log cursor %s: %s", self.name, e)
            return False
        return True


class LogShipper:
    """A log sink for :meth:`~tether.adapters.common.JobSession.follow`.

    Args:
        client: A sync Prefect client (shared with the caller; not closed here).
        flow_run_id: The flow run the lines belong to.
        task_run_id: The task run the lines belong to.
        cursor: What earlier attempts delivered (moved as batches are sent).
        store: Where the cursor is saved (None: nowhere).
        echo: Shows each line locally (the console), or None.
    """

    def __init__(
        self,
        client: Any,
        flow_run_id: UUID | None,
        task_run_id: UUID | None,
        cursor: LogCursor | None = None,
        store: CursorStore | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.flow_run_id = flow_run_id
        self.task_run_id = task_run_id
        self.cursor = cursor if cursor is not None else LogCursor()
        self.store = store
        self._cursor_saved = self.cursor.to_json()
        self.echo = echo
        self.sent = 0
        self._batch: list[tuple[str, dict[str, Any]]] = []
        self._batch_bytes = 0
        self._batch_started = 0.0
        self._last_ts: datetime | None = None
        self._next_cursor_save = 0.0  # the first batch saves it, then every CURSOR_SECONDS
        self._lock = threading.RLock()

    def _timestamp(self) -> datetime:
        now = datetime.now(timezone.utc)
        if self._last_ts is not None and now <= self._last_ts:
            now = self._last_ts + timedelta(microseconds=1)
        self._last_ts = now
        return now

    def __call__(self, text: str) -> None:
        """Takes one formatted line (``role/replica text``); sends a batch when one is due.

        Args:
            text: The line.
        """
        if self.echo is not None:
            self.echo(text)
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " [tether: line cut]"
        with self._lock:
            entry = {
                "name": LOGGER_NAME,
                "level": logging.INFO,
                "message": text,
                "timestamp": self._timestamp().isoformat(),
                "flow_run_id": str(self.flow_run_id) if self.flow_run_id else None,
                "task_run_id": str(self.task_run_id) if self.task_run_id else None,
            }
            if not self._batch:
                self._batch_started = time.monotonic()
            self._batch.append((text.split(" ", 1)[0], entry))
            self._batch_bytes += len(text)
            if (
                len(self._batch) >= BATCH_LINES
                or self._batch_bytes >= BATCH_BYTES
                or time.monotonic() - self._batch_started >= BATCH_SECONDS
            ):
                self._send()

    def _send(self) -> None:
        if not self._batch:
            return
        if self.flow_run_id is None:  # Prefect keeps no logs without a flow run
            self._batch.clear()
            self._batch_bytes = 0
            return
        payload = [entry for _, entry in self._batch]
        for attempt in range(SEND_ATTEMPTS):
            try:
                self.client.create_logs(payload)
                break
            except Exception as e:
                if attempt == SEND_ATTEMPTS - 1:
                    raise
                log.warning("sending %d log lines to Prefect failed (%s); retrying",
                            len(payload), e)
                time.sleep(0.5 * 2**attempt)
        for replica, _ in self._batch:
            self.cursor.advance(replica)
        self.sent += len(self._batch)
        self._batch.clear()
        self._batch_bytes = 0
        if time.monotonic() >= self._next_cursor_save:
            self._save_cursor()

    def _save_cursor(self) -> None:
        self._next_cursor_save = time.monotonic() + CURSOR_SECONDS
        seen = self.cursor.to_json()
        if self.store is None or seen == self._cursor_saved:
            return
        if self.store.save(seen):
            self._cursor_saved = seen

    def tick(self) -> None:
        """Sends a partial batch that has waited long enough (call it every few tenths of a
        second while the job runs: a quiet job's last lines must not wait for the next one).
        """
        with self._lock:
            if self._batch and time.monotonic() - self._batch_started >= BATCH_SECONDS:
                self._send()

    def flush(self) -> None:
        """Sends what is buffered and saves the cursor."""
        with self._lock:
            self._send()
            self._save_cursor()

    def close(self) -> None:
        """Sends the last batch (call once the job's logs have been read)."""
        self.flush()
