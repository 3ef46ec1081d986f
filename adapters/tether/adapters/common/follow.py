"""How a job session learns a job's status: the follower, a seam for the shared watch.

A session never asks the scheduler about its job itself; it asks its follower. Two shapes:

* :class:`Follower` for code that blocks (the Airflow operator in a worker, the Prefect task,
  the KFP launcher): :meth:`~Follower.status` now, :meth:`~Follower.wait` until the job is
  final or a timeout passes, :meth:`~Follower.open_watch` for a follow in short slices that
  keeps one subscription throughout. :class:`RunnerFollower`, the default, uses
  :meth:`tether.runner.Runner.status`, :meth:`tether.runner.Runner.wait` and
  :meth:`tether.runner.Runner.open_watch`.
* :class:`AsyncFollower` for an event loop (the Airflow trigger, which many triggers share):
  the same two calls as coroutines. :class:`HubAsyncFollower`, the default, follows the job
  through the process's watch hub with :meth:`tether.runner.Runner.awatch` (one asyncio
  subscription, no thread), so all followers on one loop share one view per backend
  connection. :class:`PollingAsyncFollower` polls the Runner in short worker-thread calls
  instead (one status read per follower and poll).

Both blocking followers go through the hub too: :meth:`~tether.runner.Runner.wait` and
:meth:`~tether.runner.Runner.status` read the process's shared view (see ``docs/scale.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tether.runner import Runner
from tether.runner.follow import AppEvent, AppWatch
from tether.specs import AppStatus


class Follower(Protocol):
    """Tells a blocking caller a job's status."""

    def status(self, app_handle: str) -> AppStatus | None:
        """The job's status now (None: the scheduler does not know it)."""
        ...

    def wait(
        self, app_handle: str, interval: float, timeout: float | None
    ) -> AppStatus | None:
        """The job's status once it is final, or after ``timeout`` seconds."""
        ...

    def open_watch(self, app_handle: str, interval: float) -> AppWatch:
        """One subscription to the job for a follow in short slices (``next(timeout)``)."""
        ...


class AsyncFollower(Protocol):
    """Tells an event loop a job's status."""

    async def status(self, app_handle: str) -> AppStatus | None:
        """The job's status now (None: the scheduler does not know it)."""
        ...

    async def wait(self, app_handle: str, timeout: float) -> AppStatus | None:
        """The job's status once it is final, or after ``timeout`` seconds."""
        ...

    async def aclose(self) -> None:
        """Releases what the follower holds."""
        ...


class RunnerFollower:
    """The default :class:`Follower`: the Runner's own status and wait.

    Args:
        runner: The runner (not closed here).
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def status(self, app_handle: str) -> AppStatus | None:
        """The job's status now.

        Args:
            app_handle: The job.

        Returns:
            The status.
        """
        return self.runner.status(app_handle)

    def wait(
        self, app_handle: str, interval: float, timeout: float | None
    ) -> AppStatus | None:
        """Waits (driving the scheduler's ``reconcile``) until final or ``timeout``.

        Args:
            app_handle: The job.
            interval: Poll interval for schedulers that need polling.
            timeout: Longest wait, in seconds (None: until final).

        Returns:
            The last status.
        """
        return self.runner.wait(app_handle, wait_interval=interval, timeout=timeout)

    def open_watch(self, app_handle: str, interval: float) -> AppWatch:
        """Follows the job through one subscription until closed.

        Args:
            app_handle: The job.
            interval: Seconds between retries of a reconcile that failed.

        Returns:
            The watch (close it).
        """
        return self.runner.open_watch([app_handle], wait_interval=interval)


class PollingAsyncFollower:
    """The default :class:`AsyncFollower`: short Runner calls in worker threads.

    Args:
        make_runner: Builds the runner, in a worker thread (it may read settings through
            the orchestrator, e.g. an Airflow Connection); closed by :meth:`aclose`.
        interval: Seconds between polls.
    """

    def __init__(self, make_runner: Callable[[], Runner], interval: float) -> None:
        self._make_runner = make_runner
        self.interval = interval
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    def runner(self) -> Runner:
        """The runner (built on first use; call it in a worker thread)."""
        with self._lock:
            if self._runner is None:
                self._runner = self._make_runner()
            return self._runner

    def _poll(self, app_handle: str) -> AppStatus | None:
        runner = self.runner()
        runner.reconcile(app_handle)  # the retries the engine lacks (idempotent)
        return runner.status(app_handle)

    async def status(self, app_handle: str) -> AppStatus | None:
        """The job's status now (the scheduler's ``reconcile`` applied first).

        Args:
            app_handle: The job.

        Returns:
            The status.
        """
        return await asyncio.to_thread(self._poll, app_handle)

    async def wait(self, app_handle: str, timeout: float) -> AppStatus | None:
        """Polls every ``interval`` until the job is final or ``timeout`` passed.

        Args:
            app_handle: The job.
            timeout: Longest wait, in seconds.

        Returns:
            The last status.
        """
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            status = await self.status(app_handle)
            left = end - time.monotonic()
            if status is None or status.is_terminal() or left <= 0:
                return status
            await asyncio.sleep(min(self.interval, left))

    async def aclose(self) -> None:
        """Closes the runner, if one was built."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.to_thread(runner.close)


class _Watched:
    """One job a :class:`HubAsyncFollower` follows: its last event, and the task reading it."""

    def __init__(self) -> None:
        self.last: AppEvent | None = None
        self.heard = asyncio.Event()  # the first event came (or the watch ended)
        self.ended = asyncio.Event()  # the final event came (or the watch ended)
        self.task: asyncio.Task[None] | None = None


class HubAsyncFollower:
    """The default :class:`AsyncFollower`: the job's events from the process's watch hub.

    On first use for a job it starts one task on the running loop that reads
    :meth:`tether.runner.Runner.awatch` for it and keeps the last event; :meth:`status` and
    :meth:`wait` read that, at no cost to the backend. The hub shares one view per backend
    connection among every follower in the process (all triggers in one triggerer), and
    the watch drives the scheduler's ``reconcile`` when the backend says work is due.

    Args:
        make_runner: Builds the runner, in a worker thread (it may read settings through
            the orchestrator, e.g. an Airflow Connection); closed by :meth:`aclose`.
        interval: Seconds between retries of a ``reconcile`` that failed.
    """

    def __init__(self, make_runner: Callable[[], Runner], interval: float) -> None:
        self._make_runner = make_runner
        self.interval = interval
        self._runner: Runner | None = None
        self._watched: dict[str, _Watched] = {}

    async def _watch(self, app_handle: str) -> _Watched:
        found = self._watched.get(app_handle)
        if found is None:
            found = self._watched[app_handle] = _Watched()
            if self._runner is None:
                self._runner = await asyncio.to_thread(self._make_runner)
            found.task = asyncio.create_task(self._read(self._runner, app_handle, found))
        return found

    async def _read(self, runner: Runner, app_handle: str, watched: _Watched) -> None:
        try:
            async for ev in runner.awatch([app_handle], wait_interval=self.interval):
                watched.last = ev
                watched.heard.set()
                if ev.final:
                    break
        finally:
            watched.heard.set()
            watched.ended.set()

    async def status(self, app_handle: str) -> AppStatus | None:
        """The job's status as the hub last heard it (waits for the first event).

        Args:
            app_handle: The job.

        Returns:
            The status (None: the scheduler does not know the job).
        """
        watched = await self._watch(app_handle)
        await watched.heard.wait()
        self._raise_if_failed(watched)
        return watched.last.status if watched.last is not None else None

    async def wait(self, app_handle: str, timeout: float) -> AppStatus | None:
        """Waits until the job is final or ``timeout`` passed.

        Args:
            app_handle: The job.
            timeout: Longest wait, in seconds.

        Returns:
            The last status.
        """
        watched = await self._watch(app_handle)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watched.ended.wait(), max(timeout, 0.0))
        return await self.status(app_handle)

    @staticmethod
    def _raise_if_failed(watched: _Watched) -> None:
        task = watched.task
        if task is not None and task.done() and not task.cancelled():
            err = task.exception()
            if err is not None:
                raise err

    async def aclose(self) -> None:
        """Stops the watches and closes the runner, if one was built."""
        tasks = [w.task for w in self._watched.values() if w.task is not None]
        self._watched.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.to_thread(runner.close)
