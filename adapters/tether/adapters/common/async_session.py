"""The job session on an event loop: follow a job, write its log lines, cancel it.

:class:`AsyncJobSession` is what :class:`~tether.adapters.common.JobSession` is for blocking
callers, for a caller on an event loop that many followers share (the Airflow trigger). It
follows a job launched earlier through an :class:`~.follow.AsyncFollower`, writes the job's
lines past a :class:`~.cursor.LogCursor` to a logger as an :class:`~.pump.AsyncLogFeed`
reads them, saves the cursor in the :class:`~.cursor.CursorStore` it is given, and cancels
the job. Nothing in it blocks the loop: scheduler calls and log reads run in worker threads.
Each new progress report of the job (:func:`tether.runtime.report`) goes to the caller's
:data:`~.progress.ProgressSink` while the job runs, and its last one when it has ended.

The cursor is moved on the event loop as each line is written (the feed reads ahead from a
copy), so a saved cursor never counts a line that is not in the log yet, nor misses one
that is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from tether.adapters.common.cursor import CursorStore, LogCursor
from tether.adapters.common.follow import AsyncFollower
from tether.adapters.common.progress import ProgressSink, ProgressWatch
from tether.adapters.common.pump import AsyncLogFeed
from tether.runner import Runner
from tether.specs import AppState, AppStatus

DRAIN_SECONDS = 10.0
"""After the job ended, how long the last log lines may take to arrive."""


class AsyncJobSession:
    """Follows a job launched earlier on an event loop, writing its log lines to ``log``.

    Use it as an ``async with`` block (it opens the log feed and closes the follower).

    Args:
        app_handle: The job.
        follower: Where the job's status comes from.
        make_runner: Builds a runner in a worker thread (to read logs, to cancel).
        log: Receives the job's lines and the session's notes (``info``/``error``).
        poll_interval: Seconds between status polls.
        cursor_store: Where the log cursor is kept (None: nowhere).
        stream_logs: Write the job's log lines.
        on_progress: Receives each new progress report of the job (in a worker thread).
    """

    def __init__(
        self,
        app_handle: str,
        follower: AsyncFollower,
        make_runner: Callable[[], Runner],
        log: Any,
        poll_interval: float,
        cursor_store: CursorStore | None = None,
        stream_logs: bool = True,
        on_progress: ProgressSink | None = None,
    ) -> None:
        self.app_handle = app_handle
        self.follower = follower
        self._make_runner = make_runner
        self.log = log
        self.poll_interval = poll_interval
        self.store = cursor_store
        self.stream_logs = stream_logs
        self.cursor: LogCursor | None = None
        self._feed: AsyncLogFeed | None = None
        self._saved: dict[str, int] = {}
        self._watch = ProgressWatch(on_progress) if on_progress is not None else None
        self._reader: Runner | None = None

    async def __aenter__(self) -> Self:
        if self.stream_logs:
            store = self.store
            saved = await asyncio.to_thread(store.load) if store is not None else None
            self.cursor = LogCursor.from_json(saved)
            self._saved = self.cursor.to_json()
            self._feed = AsyncLogFeed(self._make_runner, self.app_handle, self.cursor)
            self._feed.start(asyncio.get_running_loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._feed is not None:
            self._feed.stop()
        if self._reader is not None:
            await asyncio.to_thread(self._reader.close)
            self._reader = None
        await self.follower.aclose()

    # ---- follow ----------------------------------------------------------------------------
    async def follow(self, until: float | None = None) -> AppStatus | None:
        """Follows the job, writing its lines, until it is final or ``until`` passed.

        Args:
            until: A deadline (seconds since the epoch), if any.

        Returns:
            The last status: final, None (the scheduler no longer knows the job), or not
            final when the deadline passed.
        """
        last: AppState | None = None
        while True:
            status = await self.follower.status(self.app_handle)
            if status is None or status.is_terminal():
                await self._read_progress(final=True)
                return status
            await self._read_progress()
            if until is not None and time.time() >= until:
                return status
            if status.state != last:
                self.log.info("tether job %s is %s", self.app_handle, status.state.name)
                last = status.state
            pause = self.poll_interval
            if until is not None:
                pause = max(min(pause, until - time.time()), 0.0)
            if self._feed is None or self._feed.done:
                await asyncio.sleep(pause)
            else:
                await self._write_for(pause)

    async def cancel_and_wait(self, timeout: float) -> AppStatus | None:
        """Cancels the job (in a worker thread) and follows it for up to ``timeout`` seconds.

        Args:
            timeout: Longest wait for a final state.

        Returns:
            The last status.
        """
        await asyncio.to_thread(self._cancel)
        return await self.follower.wait(self.app_handle, timeout)

    async def _read_progress(self, final: bool = False) -> None:
        """Hands the job's report to the sink when it is new (due, or ``final``)."""
        if self._watch is not None and (final or self._watch.due()):
            await asyncio.to_thread(self._progress_now)

    def _progress_now(self) -> None:
        assert self._watch is not None
        if self._reader is None:
            self._reader = self._make_runner()
        self._watch.read(self._reader, self.app_handle)

    def _cancel(self) -> None:
        with self._make_runner() as runner:
            runner.cancel(self.app_handle)

    # ---- the log lines ---------------------------------------------------------------------
    async def write_rest(self, timeout: float = DRAIN_SECONDS) -> None:
        """Writes the last lines: until every replica's log is complete, or ``timeout``."""
        if self._feed is None:
            return
        end = time.monotonic() + timeout
        while not self._feed.done and time.monotonic() < end:
            await self._write_for(end - time.monotonic())
        await self._write_for(0.0)

    async def _write_for(self, timeout: float) -> None:
        """Writes the lines that arrive within ``timeout`` seconds, then saves the cursor."""
        feed, cursor = self._feed, self.cursor
        assert feed is not None and cursor is not None
        end = time.monotonic() + timeout
        while not feed.done:
            item = await feed.next(end - time.monotonic())
            if item is None:
                break
            replica, count, text = item
            self.log.info("%s", text)
            if count:
                cursor.advance(replica, count)
        await self._save(cursor)

    async def _save(self, cursor: LogCursor) -> None:
        seen = cursor.to_json()
        if self.store is None or seen == self._saved:
            return
        if await asyncio.to_thread(self.store.save, seen):
            self._saved = seen  # else the next write tries again
