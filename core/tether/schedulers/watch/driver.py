"""The one thread that keeps a shared view of one :class:`WatchKey` up to date.

Each round reads every followed job of the view at once (:meth:`Reader.read`); a job the
read does not show is not finished: when two reads in a row miss it, one direct read
(:meth:`Reader.confirm`) decides, and only a backend that says "no such job" ends it. A read
that fails publishes nothing (the last known state stands) and is retried with backoff; so is
a reader that cannot be made or started. Reads that keep failing past the view's
:class:`~tether.schedulers.watch.events.FailurePolicy` are reported (a
:class:`~tether.schedulers.watch.events.ViewError`) at each failure until one succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tether.schedulers.api import DescribeAppResponse
from tether.schedulers.watch.backoff import Backoff
from tether.schedulers.watch.events import FailurePolicy, FollowTarget, Reader, ViewError

log: logging.Logger = logging.getLogger(__name__)

MISSES_BEFORE_CONFIRM = 2
"""Reads in a row that must miss a job before a direct read is asked whether it exists."""

RECHECK_S = 0.5
"""The pause before the next read while a job waits for its confirmation."""

Publish = Callable[[str, "DescribeAppResponse | None"], None]
Report = Callable[["ViewError | None"], None]


class FailureStreak:
    """Counts a view's failed reads in a row and says when they pass the policy.

    Args:
        target: The view.
        policy: When failures are reported.
        clock: The monotonic clock (seconds).
    """

    def __init__(
        self,
        target: FollowTarget,
        policy: FailurePolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = target
        self._policy = policy
        self._clock = clock
        self.failures = 0
        self._since = 0.0
        self.reported = False

    def failed(self, error: BaseException) -> ViewError | None:
        """Counts one failed read.

        Args:
            error: Why it failed.

        Returns:
            The error to report, once past the policy; None while it may be a blip.
        """
        now = self._clock()
        if self.failures == 0:
            self._since = now
        self.failures += 1
        seconds = now - self._since
        if self.failures < self._policy.failures or seconds < self._policy.seconds:
            return None
        self.reported = True
        text = str(error) or type(error).__name__
        return ViewError(self._target.key, text, self.failures, seconds)

    def succeeded(self) -> bool:
        """Forgets the failures after a read that succeeded.

        Returns:
            Whether an error had been reported (its followers must hear it is over).
        """
        was, self.reported, self.failures = self.reported, False, 0
        return was


class Driver:
    """Reads one shared view in its own thread until stopped.

    Args:
        target: Where and how often to read (the reader is built in the thread).
        followed: Returns the ids the view follows now (not yet final).
        publish: Receives each job's read, or None for a job confirmed gone.
        report: Receives a :class:`ViewError` at each failed read past ``policy``, and None
            after the next read that succeeded.
        policy: When failed reads are reported.
    """

    def __init__(
        self,
        target: FollowTarget,
        followed: Callable[[], frozenset[str]],
        publish: Publish,
        report: Report = lambda error: None,
        policy: FailurePolicy = FailurePolicy(),  # noqa: B008 (frozen: shared safely)
    ) -> None:
        self.target = target
        self._followed = followed
        self._publish = publish
        self._report = report
        self._streak = FailureStreak(target, policy)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._reader: Reader | None = None
        self._ready = threading.Event()
        self._misses: dict[str, int] = {}
        self._found: set[str] = set()  # confirmed to exist by a direct read
        self.rounds = 0
        self._thread = threading.Thread(
            target=self._run, name=f"tether-watch {target.key}", daemon=True
        )

    def start(self) -> None:
        """Starts the thread."""
        self._thread.start()

    def wake(self) -> None:
        """Asks for a read now (a job was followed, or the backend saw a change)."""
        self._wake.set()

    def stop(self) -> None:
        """Stops the thread and the reader (returns without waiting for the thread)."""
        self._stopped.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the thread to end.

        Args:
            timeout: The longest wait, in seconds.
        """
        self._thread.join(timeout)

    def reader(self, timeout: float) -> Reader | None:
        """The view's reader once started (its streams open), for reads of its cache.

        Args:
            timeout: The longest wait for it to start, in seconds.

        Returns:
            The reader; None when it did not start in time or the driver stopped.
        """
        self._ready.wait(timeout)
        return self._reader if self._ready.is_set() and not self.stopped else None

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped.is_set()

    def _run(self) -> None:
        backoff = Backoff()
        try:
            while not self._stopped.is_set():
                pause = self.target.interval
                try:
                    if self._round(self._open()):
                        pause = min(pause, RECHECK_S)
                    backoff.reset()
                    if self._streak.succeeded():
                        self._report(None)
                except Exception as e:  # a failed read publishes nothing; retried later
                    pause = backoff.next()
                    log.warning(
                        "reading %s failed (%s); again in %.1f s", self.target.key, e, pause
                    )
                    error = self._streak.failed(e)
                    if error is not None:
                        self._report(error)
                self._wake.wait(pause)
                self._wake.clear()
        except Exception:
            log.exception("the watch of %s stopped", self.target.key)
        finally:
            if self._reader is not None:
                self._reader.stop()

    def _open(self) -> Reader:
        """The view's reader, made and started on first use (again after a failed start)."""
        if self._reader is None:
            reader = self.target.make_reader()
            try:
                reader.start(self.wake)
            except BaseException:
                reader.stop()
                raise
            self._reader = reader
            self._ready.set()
        return self._reader

    def _round(self, reader: Reader) -> bool:
        """One read of every followed job; returns whether a job awaits confirmation."""
        ids = self._followed()
        self._misses = {i: n for i, n in self._misses.items() if i in ids}
        self._found &= ids
        if not ids:
            return False
        seen = reader.read(ids)
        self.rounds += 1
        if seen is None:  # the view is not ready (its first list has not arrived)
            return False
        for app_id, shown in seen.items():
            if app_id in ids:
                self._misses.pop(app_id, None)
                self._publish(app_id, shown)
        waiting = False
        for app_id in sorted(ids - seen.keys()):
            misses = self._misses.get(app_id, 0) + 1
            if misses < MISSES_BEFORE_CONFIRM:
                self._misses[app_id] = misses
                waiting = waiting or app_id not in self._found
                continue
            try:
                resp = reader.confirm(app_id)
            except Exception as e:  # undecided: ask again next round, publish nothing
                log.warning("confirming %s on %s failed: %s", app_id, self.target.key, e)
                self._misses[app_id] = misses
                continue
            self._misses.pop(app_id, None)
            if resp is not None:
                self._found.add(app_id)
            self._publish(app_id, resp)
        return waiting
