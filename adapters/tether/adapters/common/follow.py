"""How a job session learns a job's status: the follower, a seam for the shared watch.

A session never asks the scheduler about its job itself; it asks its follower. Two shapes:

* :class:`Follower` for code that blocks (the Airflow operator in a worker, the Prefect task,
  the KFP launcher): :meth:`~Follower.status` now, :meth:`~Follower.wait` until the job is
  final or a timeout passes. :class:`RunnerFollower`, the default, uses
  :meth:`tether.runner.Runner.status` and :meth:`tether.runner.Runner.wait`.
* :class:`AsyncFollower` for an event loop (the Airflow trigger, which many triggers share):
  the same two calls as coroutines. :class:`PollingAsyncFollower`, the default, polls the
  Runner in short worker-thread calls and sleeps on the loop in between, so a waiting
  trigger holds no thread.

A process-wide watch hub plugs in by implementing these (one subscription per handle instead
of one poll per follower); nothing else in the adapters changes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tether.runner import Runner
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
