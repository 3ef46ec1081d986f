"""Ending a blocking log read early, from another thread: a consumer's stop request.

A followed log (``Scheduler.log_iter(should_tail=True)``) may wait a long time for its next
line: a Kubernetes replica whose pod is Pending waits on the watch hub, a long-lived log
request waits on its socket, a polling backend sleeps between looks. A consumer that gives
the stream up (the log fan-in of :mod:`tether.runner.logs`) sets a :class:`StopToken`; the
thread that reads the stream reads it inside :func:`stoppable`, and the stream's waits
(:func:`pause`, or a wait that registers a waker with :meth:`StopToken.on_set`) then raise
:class:`Stopped` at once, so the stream's generator unwinds (its ``finally`` releases what
it holds) and the thread ends, without waiting for a line or for the job to change.

Without a token (every other caller) the waits behave as before: :func:`pause` sleeps.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class Stopped(BaseException):
    """The reading thread's :class:`StopToken` was set: the read ends here.

    A ``BaseException``, as ``GeneratorExit`` is: the retry loops of the backends' streams
    catch ``Exception`` (a dropped connection is retried) and must not retry this.
    """


class StopToken:
    """A stop request, set once by the consumer, seen by the waits of a reading thread."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._wakers: dict[int, Callable[[], None]] = {}
        self._next = 0

    def set(self) -> None:
        """Requests the stop and wakes every registered wait (idempotent)."""
        with self._lock:
            self._event.set()
            wakers = list(self._wakers.values())
        for wake in wakers:
            wake()

    def is_set(self) -> bool:
        """Whether the stop was requested."""
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Waits until the stop is requested or ``timeout`` seconds passed.

        Args:
            timeout: The longest wait, in seconds.

        Returns:
            Whether the stop was requested.
        """
        return self._event.wait(timeout)

    def on_set(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Registers ``wake`` to be called when the stop is requested (at once if it was).

        Args:
            wake: Wakes a blocked wait (notifies a condition, shuts a socket); must not block.

        Returns:
            Unregisters it.
        """
        with self._lock:
            if not self._event.is_set():
                key = self._next
                self._next += 1
                self._wakers[key] = wake

                def unregister() -> None:
                    with self._lock:
                        self._wakers.pop(key, None)

                return unregister
        wake()
        return lambda: None


_local = threading.local()


@contextlib.contextmanager
def stoppable(token: StopToken) -> Iterator[None]:
    """Makes the current thread's waits end with :class:`Stopped` once ``token`` is set.

    Args:
        token: The consumer's stop request.

    Yields:
        Nothing.
    """
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        yield
    finally:
        _local.token = previous


def current() -> StopToken | None:
    """The current thread's stop token (None: its reads are not stoppable)."""
    token: StopToken | None = getattr(_local, "token", None)
    return token


def check() -> None:
    """Raises :class:`Stopped` when the current thread's stop was requested.

    Raises:
        Stopped: When it was.
    """
    token = current()
    if token is not None and token.is_set():
        raise Stopped()


def wait_for(cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
    """``cond.wait_for(predicate, timeout)`` that also ends on the thread's stop request.

    Args:
        cond: The condition (not held by the caller).
        predicate: What is waited for (evaluated with ``cond`` held).
        timeout: The longest wait, in seconds.

    Returns:
        The predicate's last value.

    Raises:
        Stopped: When the current thread's stop is (or gets) requested.
    """
    token = current()
    if token is None:
        with cond:
            return cond.wait_for(predicate, timeout)

    def wake() -> None:
        with cond:
            cond.notify_all()

    unregister = token.on_set(wake)
    try:
        with cond:
            done = cond.wait_for(lambda: token.is_set() or predicate(), timeout)
    finally:
        unregister()
    check()
    return done


def pause(seconds: float) -> None:
    """Sleeps between two looks of a polling stream, ending at once on a stop request.

    Args:
        seconds: How long.

    Raises:
        Stopped: When the current thread's stop is (or gets) requested.
    """
    token = current()
    if token is None:
        time.sleep(seconds)
    elif token.wait(seconds):
        raise Stopped()
