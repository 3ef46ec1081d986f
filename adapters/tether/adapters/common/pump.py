"""The log pump: a job's lines past a cursor, read on a helper thread, handed to a consumer.

Reading a job's logs blocks (on its files, or a follow request to its API) for as long as
the job runs, so the lines are read on a helper thread of their own while the follower waits
for the job's status elsewhere. Two consumers:

* :class:`LogPump` hands each line to a sink on that thread (a blocking follower: the
  Airflow operator in a worker, the Prefect task, the KFP launcher);
* :class:`AsyncLogFeed` hands the lines to an event loop through an ``asyncio.Queue`` (the
  Airflow trigger), which writes them and moves the cursor itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable

from tether.adapters.common.cursor import LogCursor
from tether.runner import Runner

log = logging.getLogger(__name__)

LineSink = Callable[[str], None]
"""Receives one formatted line (``role/replica text``) at a time."""

Item = tuple[str, int, str]
"""``(role/replica, the line's number in that replica's log, the formatted line)``; a note
of the pump's own has no replica and number 0."""


class LogPump:
    """Feeds a job's lines past ``skip`` to ``sink`` on a helper thread.

    Args:
        runner: The runner to read with (its scheduler already built by the caller).
        app_handle: The job.
        sink: Receives each line; its exceptions stop the pump and are raised by
            :meth:`check`.
        skip: Lines an earlier follower delivered (not moved here).
    """

    def __init__(
        self, runner: Runner, app_handle: str, sink: LineSink, skip: LogCursor | None = None
    ) -> None:
        self._runner = runner
        self._handle = app_handle
        self._sink = sink
        self._reader = skip.copy() if skip is not None else LogCursor()
        self.delivered = 0
        self._errors: list[BaseException] = []
        self._thread: threading.Thread | None = None

    def start(self) -> LogPump:
        """Starts the helper thread (in a copy of the caller's context).

        Returns:
            The pump.
        """
        ctx = contextvars.copy_context()
        self._thread = threading.Thread(target=ctx.run, args=(self._run,), daemon=True,
                                        name=f"tether-logs-{self._handle}")
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for _replica, _count, text in self._reader.unseen(self._runner, self._handle, True):
                self._sink(text)
                self.delivered += 1
        except BaseException as e:
            self._errors.append(e)

    def check(self) -> None:
        """Raises the exception the sink or the log reader raised, if any."""
        if self._errors:
            raise self._errors[0]

    def drain(self, poll_interval: float, drain_timeout: float) -> None:
        """Waits, once the job finished, for the pump to deliver the rest.

        The wait ends when the log streams end, or when no line arrived for
        ``drain_timeout`` seconds (a chatty job's backlog is delivered in full).

        Args:
            poll_interval: Longest single wait.
            drain_timeout: Longest quiet time.
        """
        thread = self._thread
        if thread is None:
            return
        last, deadline = self.delivered, time.monotonic() + drain_timeout
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(min(poll_interval, max(deadline - time.monotonic(), 0.0)))
            if self.delivered != last:  # still delivering: keep waiting
                last, deadline = self.delivered, time.monotonic() + drain_timeout
        if thread.is_alive():
            log.warning("the logs of %s are still streaming %.0f s after it finished; "
                        "not waiting for the rest", self._handle, drain_timeout)
        self.check()


class AsyncLogFeed:
    """A job's lines past a cursor, read on a helper thread, handed to an event loop.

    Args:
        make_runner: Builds the runner the helper thread reads with (closed there).
        app_handle: The job.
        cursor: Lines already delivered (the feed reads from a copy; the consumer moves the
            cursor as it writes lines).
    """

    def __init__(
        self, make_runner: Callable[[], Runner], app_handle: str, cursor: LogCursor
    ) -> None:
        self._make_runner = make_runner
        self._handle = app_handle
        self._reader = cursor.copy()
        self._stop = threading.Event()
        self._queue: asyncio.Queue[Item | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.done = False

    def start(self, loop: asyncio.AbstractEventLoop) -> AsyncLogFeed:
        """Starts the helper thread, which posts to ``loop``.

        Args:
            loop: The running event loop.

        Returns:
            The feed.
        """
        self._loop = loop
        threading.Thread(target=self._pump, daemon=True,
                         name=f"tether-trigger-logs-{self._handle}").start()
        return self

    def stop(self) -> None:
        """Tells the helper thread to stop at its next line (or the job's end)."""
        self._stop.set()

    def _post(self, item: Item | None) -> bool:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is gone: the consumer ended
            return False
        return True

    def _pump(self) -> None:
        # a consumer that stops while the job runs leaves this thread until the next line
        # (or the job's end): the log readers block on the job's files or API
        with self._make_runner() as runner:
            try:
                for item in self._reader.unseen(runner, self._handle, follow=True):
                    if self._stop.is_set() or not self._post(item):
                        return
            except Exception as e:
                self._post(("", 0, f"[tether] cannot stream the job's logs: {e}"))
            finally:
                self._post(None)

    async def next(self, timeout: float) -> Item | None:
        """The next line, or None when none came within ``timeout`` or the feed ended
        (then :attr:`done` is set).

        Args:
            timeout: Longest wait, in seconds.

        Returns:
            The line, or None.
        """
        if self.done:
            return None
        # asyncio.wait, not wait_for: wait_for can swallow the consumer's cancellation on
        # Python 3.11 when the line arrives at the same moment
        getter = asyncio.ensure_future(self._queue.get())
        try:
            finished, _ = await asyncio.wait({getter}, timeout=max(timeout, 0.0))
        finally:
            if not getter.done():
                getter.cancel()
        if not finished:
            return None
        item = getter.result()
        if item is None:
            self.done = True
        return item
