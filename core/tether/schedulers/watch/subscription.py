"""Subscribing to the hub: :class:`Subscription` for threads, :class:`AsyncSubscription` for
an asyncio event loop (an Airflow triggerer). The two never mix: the sync one blocks on a
queue, the async one awaits an ``asyncio.Queue`` that the hub's thread fills through the
loop's ``call_soon_threadsafe``.

A subscription follows any number of jobs, each named by a ``ref`` of the caller's choice
(a handle), and yields :class:`~tether.schedulers.watch.events.JobEvent` s: the current state
of each job as soon as it is known, then each change, the final one exactly once. Closing
it (or dropping it: a finalizer releases it) frees everything it followed in the hub.
"""

from __future__ import annotations

import contextlib
import queue
import time
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from tether.schedulers.api import Scheduler
from tether.schedulers.watch.events import JobEvent, WatchKey
from tether.schedulers.watch.hub import Deliver, WatchHub, get_hub

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where an async subscription is made or read, not with this module: the
# synchronous followers (the CLI's run, status and wait) would pay ~10 ms at every start


class _Following:
    """What both kinds of subscription share: the hub registration and the open jobs."""

    def __init__(self, hub: WatchHub | None, deliver: Deliver) -> None:
        self._hub = hub or get_hub()
        self._id = self._hub.subscribe(deliver)
        self._finalizer = weakref.finalize(self, self._hub.release, self._id)
        self._open: set[Hashable] = set()
        self._keys: dict[Hashable, tuple[WatchKey, str]] = {}

    def follow(self, scheduler: Scheduler[Any], app_id: str, ref: Hashable = None) -> None:
        """Follows a job (never blocks on the backend).

        Args:
            scheduler: The job's scheduler.
            app_id: The job.
            ref: What events name it by (default: the app id); unique per subscription.
        """
        ref = app_id if ref is None else ref
        self._open.add(ref)
        self._keys[ref] = (self._hub.follow(self._id, scheduler, app_id, ref), app_id)

    def unfollow(self, ref: Hashable) -> None:
        """Stops following a job.

        Args:
            ref: The job's ref.
        """
        self._open.discard(ref)
        found = self._keys.pop(ref, None)
        if found is not None:
            self._hub.unfollow(self._id, *found)

    @property
    def open(self) -> frozenset[Hashable]:
        """The refs of the followed jobs not yet final (as far as events were taken)."""
        return frozenset(self._open)

    def _took(self, ev: JobEvent) -> JobEvent:
        if ev.final:
            self._open.discard(ev.ref)
        return ev

    def close(self) -> None:
        """Releases the subscription and what it followed (idempotent)."""
        self._finalizer()


class Subscription(_Following):
    """A thread's subscription (see the module docs).

    Args:
        hub: The hub (default: the process's).
    """

    def __init__(self, hub: WatchHub | None = None) -> None:
        self._queue: queue.SimpleQueue[JobEvent] = queue.SimpleQueue()
        super().__init__(hub, self._queue.put)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def get(self, timeout: float | None = None) -> JobEvent | None:
        """The next event.

        Args:
            timeout: The longest wait in seconds (None: until one comes).

        Returns:
            The event, or None after ``timeout``.
        """
        try:
            return self._took(self._queue.get(timeout=timeout))
        except queue.Empty:
            return None

    def events(self, timeout: float | None = None) -> Iterator[JobEvent]:
        """Events until every followed job is final, or ``timeout`` seconds passed.

        Args:
            timeout: The longest time in all (None: no limit).

        Yields:
            Events.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._open:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            ev = self.get(left)
            if ev is not None:
                yield ev


class AsyncSubscription(_Following):
    """An asyncio subscription; make it inside the running loop that will read it.

    Args:
        hub: The hub (default: the process's).
    """

    def __init__(self, hub: WatchHub | None = None) -> None:
        import asyncio

        self._queue: asyncio.Queue[JobEvent] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        super().__init__(hub, _loop_deliver(loop, self._queue))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def get(self, timeout: float | None = None) -> JobEvent | None:
        """The next event.

        Args:
            timeout: The longest wait in seconds (None: until one comes).

        Returns:
            The event, or None after ``timeout``.
        """
        import asyncio

        try:
            ev = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None
        return self._took(ev)

    async def events(self, timeout: float | None = None) -> AsyncIterator[JobEvent]:
        """Events until every followed job is final, or ``timeout`` seconds passed.

        Args:
            timeout: The longest time in all (None: no limit).

        Yields:
            Events.
        """
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._open:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            ev = await self.get(left)
            if ev is not None:
                yield ev


def _loop_deliver(loop: asyncio.AbstractEventLoop, q: asyncio.Queue[JobEvent]) -> Deliver:
    """A deliver function for the hub's thread that hands events to ``loop``'s queue."""

    def deliver(ev: JobEvent) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            loop.call_soon_threadsafe(q.put_nowait, ev)

    return deliver
