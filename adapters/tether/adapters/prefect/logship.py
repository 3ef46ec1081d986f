"""Every log line of a tether job into the Prefect API, in order, each exactly once.

Prefect's own API log handler queues records for a background worker that sends them in
batches and drains at interpreter exit; a job printing thousands of lines overruns it (lines
are dropped and the process lingers at exit while the backlog drains). A component task
therefore ships its job's lines itself with :class:`LogShipper`:

* lines go straight to ``POST /logs/`` in batches, from the thread that reads the job's logs,
  so that thread waits while a batch is sent: back-pressure reaches the log readers, whose
  queue is bounded (:func:`tether.runner.fan_in`), and nothing is buffered without bound;
* a line that comes after a quiet spell is sent at once (while the task is still waiting for
  the job), later ones are batched; so a short job's lines are usually in Prefect before it
  ends, and the task has nothing left to send;
* timestamps are strictly increasing, so Prefect (which orders logs by timestamp) shows the
  lines in the order the job wrote them;
* :meth:`LogShipper.close` sends the last batch before the task returns: no background
  thread is left to drain after the flow ends;
* the lines are also echoed to the task run's logger with ``send_to_api=False`` (the
  console shows them, the API receives them once).

Every shipped record carries the job's own logger name (:func:`job_logger_name`). That is
the log cursor: an attempt that re-attaches to the job counts the records of that name the
Prefect API holds for the flow run (:func:`shipped_cursor`) and skips as many lines of each
replica. Prefect stores a batch in one transaction, so what it holds is exactly what earlier
attempts delivered, whenever the one before was killed; nothing is written besides the lines
themselves.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from tether.adapters.common import LogCursor

log = logging.getLogger(__name__)

BATCH_LINES = 1000
"""Most lines in one request."""

BATCH_BYTES = 512 * 1024
"""Most message bytes in one request (Prefect's API takes a few MB per request)."""

BATCH_SECONDS = 0.5
"""A partial batch is sent once its oldest line is this old (when the next line arrives);
a line arriving this long after the last request is sent at once."""

MAX_LINE_CHARS = 64 * 1024
"""Longer lines are cut (Prefect drops log messages over its size limit)."""

SEND_ATTEMPTS = 4
"""Tries per batch before the task fails (the job keeps running; a retry resumes)."""

READ_PAGE = 200
"""Records per request when counting what was shipped (Prefect's default page limit)."""

LOGGER_PREFIX = "tether.job."
"""The start of the logger name a job's shipped lines carry."""


def job_logger_name(app_handle: str) -> str:
    """The logger name the lines of one job carry in Prefect (its log cursor's key).

    Args:
        app_handle: The job.

    Returns:
        e.g. ``tether.job.3f2a9c01d2e4b5a6`` (a hash: another job's lines never match).
    """
    digest = hashlib.sha256(app_handle.encode("utf-8")).hexdigest()[:16]
    return f"{LOGGER_PREFIX}{digest}"


_SERVER_SEARCHES = [True]
"""Whether the Prefect server answers text searches of logs (cleared at its first refusal:
a server on SQLite older than 3.44 fails them)."""


def _log_filter(flow_run_id: UUID, name: str, after: Any, search: bool) -> Any:
    from prefect.client.schemas.filters import (
        LogFilter,
        LogFilterFlowRunId,
        LogFilterTimestamp,
    )

    fields: dict[str, Any] = {"flow_run_id": LogFilterFlowRunId(any_=[flow_run_id])}
    if after is not None:
        fields["timestamp"] = LogFilterTimestamp(after_=after)
    if search:
        from prefect.client.schemas.filters import LogFilterTextSearch

        fields["text"] = LogFilterTextSearch(query=name)
    return LogFilter(**fields)


def _read_page(client: Any, flow_run_id: UUID, name: str, after: Any, offset: int) -> list[Any]:
    """One page of the flow run's records from ``after`` on: only those naming ``name``
    where the server can search log text (Prefect >= 3.5), else all of them."""
    from prefect.client.schemas.filters import LogFilter
    from prefect.client.schemas.sorting import LogSort
    from prefect.exceptions import PrefectHTTPStatusError

    def read(search: bool) -> list[Any]:
        return list(client.read_logs(
            log_filter=_log_filter(flow_run_id, name, after, search), limit=READ_PAGE,
            offset=offset, sort=LogSort.TIMESTAMP_ASC,
        ))

    if _SERVER_SEARCHES[0] and "text" in LogFilter.model_fields:
        try:
            return read(True)
        except PrefectHTTPStatusError as e:
            _SERVER_SEARCHES[0] = False
            log.info("the Prefect server cannot search log text (%s); reading all the "
                     "flow run's log records to count a job's lines", e)
    return read(False)


def shipped_cursor(client: Any, flow_run_id: UUID | None, app_handle: str) -> LogCursor:
    """The lines of a job that earlier attempts shipped, as the Prefect API holds them.

    Reads the flow run's records of the job's logger name in timestamp order, a page at a
    time (each page starts at the last timestamp read); where the server cannot search log
    text, it reads all the flow run's records and keeps those. A batch Prefect stored twice
    (a request retried after its answer was lost) has the same timestamps and messages, and
    counts once.

    Args:
        client: A sync Prefect client.
        flow_run_id: The flow run the lines were shipped to (None: nothing was shipped).
        app_handle: The job.

    Returns:
        Lines shipped per ``role/replica``.
    """
    cursor = LogCursor()
    if flow_run_id is None:
        return cursor
    name = job_logger_name(app_handle)
    seen: set[tuple[Any, str]] = set()
    after: Any = None  # a timestamp as Prefect returns it
    at_after = 0  # records read whose timestamp is ``after`` (the next page repeats them)
    while True:
        page = _read_page(client, flow_run_id, name, after, at_after)
        for record in page:
            key = (record.timestamp, record.message)
            if record.name != name or key in seen:
                continue
            seen.add(key)
            cursor.advance(record.message.split(" ", 1)[0])
        if len(page) < READ_PAGE:
            return cursor
        last = page[-1].timestamp
        ties = sum(1 for record in page if record.timestamp == last)
        at_after = at_after + ties if last == after else ties
        after = last


class LogShipper:
    """A log sink for :meth:`~tether.adapters.common.JobSession.follow`.

    Args:
        client: A sync Prefect client (shared with the caller; not closed here).
        flow_run_id: The flow run the lines belong to.
        task_run_id: The task run the lines belong to.
        app_handle: The job (names the logger its records carry: :func:`job_logger_name`).
        cursor: What earlier attempts delivered (moved as batches are sent).
        echo: Shows each line locally (the console), or None.
    """

    def __init__(
        self,
        client: Any,
        flow_run_id: UUID | None,
        task_run_id: UUID | None,
        app_handle: str,
        cursor: LogCursor | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.flow_run_id = flow_run_id
        self.task_run_id = task_run_id
        self.logger_name = job_logger_name(app_handle)
        self.cursor = cursor if cursor is not None else LogCursor()
        self.echo = echo
        self.sent = 0
        self._batch: list[tuple[str, dict[str, Any]]] = []
        self._batch_bytes = 0
        self._batch_started = 0.0
        self._last_ts: datetime | None = None
        self._last_send = float("-inf")
        self._lock = threading.RLock()

    def _timestamp(self) -> datetime:
        now = datetime.now(timezone.utc)
        if self._last_ts is not None and now <= self._last_ts:
            now = self._last_ts + timedelta(microseconds=1)
        self._last_ts = now
        return now

    def __call__(self, text: str) -> None:
        """Takes one formatted line (``role/replica text``); sends a batch when one is due
        (or at once, when nothing was sent for ``BATCH_SECONDS``).

        Args:
            text: The line.
        """
        if self.echo is not None:
            self.echo(text)
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " [tether: line cut]"
        with self._lock:
            entry = {
                "name": self.logger_name,
                "level": logging.INFO,
                "message": text,
                "timestamp": self._timestamp().isoformat(),
                "flow_run_id": str(self.flow_run_id) if self.flow_run_id else None,
                "task_run_id": str(self.task_run_id) if self.task_run_id else None,
            }
            now = time.monotonic()
            if not self._batch:
                self._batch_started = now
            self._batch.append((text.split(" ", 1)[0], entry))
            self._batch_bytes += len(text)
            if (
                len(self._batch) >= BATCH_LINES
                or self._batch_bytes >= BATCH_BYTES
                or now - self._batch_started >= BATCH_SECONDS
                or now - self._last_send >= BATCH_SECONDS  # after a quiet spell: at once
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
        self._last_send = time.monotonic()
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

    def tick(self) -> None:
        """Sends a partial batch that has waited long enough (call it every few tenths of a
        second while the job runs: a quiet job's last lines must not wait for the next one).
        Never waits: while another thread is sending, that thread carries on.
        """
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._batch and time.monotonic() - self._batch_started >= BATCH_SECONDS:
                self._send()
        finally:
            self._lock.release()

    def flush(self) -> None:
        """Sends what is buffered."""
        with self._lock:
            self._send()

    def close(self) -> None:
        """Sends the last batch (call once the job's logs have been read)."""
        self.flush()
