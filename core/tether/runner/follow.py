"""Following launched apps through the process's watch hub: status, wait, watch, wait_any.

Every follower in a process shares one view per backend connection (see
:mod:`tether.schedulers.watch`), so following N apps costs the backend about what one costs.
:class:`~tether.runner.api.Runner` delegates its ``status``, ``wait``, ``watch`` and
``wait_any`` here, and ``awatch`` (the same on an asyncio event loop).

Retries the engine lacks (``Scheduler.reconcile``) are driven by change: a follower
reconciles an app when the scheduler says work is due (``DescribeAppResponse.actions_due``:
a restart or a stop it planned) and once at the end; a reconcile that fails is retried every
``wait_interval`` until one succeeds. An app whose state does not change costs nothing.

A backend that cannot be read is not waited on in silence: when the hub reports that an
app's view keeps failing (its :class:`~tether.schedulers.watch.FailurePolicy`: 5 failed reads
over 2 minutes by default), the follower raises
:class:`~tether.schedulers.watch.WatchReadError`, naming the backend and its last error.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tether.runner.events import AppEvent
from tether.runner.logical import is_chain_handle
from tether.schedulers.capabilities import FollowMode
from tether.schedulers.watch import (
    AsyncSubscription,
    JobEvent,
    Subscription,
    WatchHub,
    WatchReadError,
    get_hub,
)
from tether.specs import AppHandle, AppStatus

if TYPE_CHECKING:
    from tether.runner.chain_watch import ChainFollower
    from tether.runner.chains import Chains
    from tether.runner.pool import SchedulerPool
    from tether.schedulers.api import Scheduler

log: logging.Logger = logging.getLogger(__name__)


def _app_event(ev: JobEvent) -> AppEvent:
    handle = str(ev.ref)
    return AppEvent(handle, ev.state, ev.status(), ev.msg, ev.final, ev.previous)


def _readable(ev: JobEvent) -> JobEvent:
    """The event, unless it says the app's view cannot be read (then raised)."""
    if ev.error is None:
        return ev
    raise WatchReadError(
        f"cannot follow {ev.ref}: {ev.error.describe()}; its state is unknown (check that "
        f"{ev.key.backend} is reachable and the credentials valid, then wait again)",
        backend=ev.key.backend,
    )


def _confirmed(pool: SchedulerPool, ev: JobEvent) -> AppEvent:
    """An app's final event with the status a direct read gives (one read per ended app).

    Correctness before savings: a shared view can hear that a job ended before it hears the
    replicas that say why (a Kubernetes Job's failure before its pod's exit code), so the
    final status a follower returns is read from the backend itself.
    """
    event = _app_event(ev)
    sched, app_id = pool.for_handle(event.app_handle)
    try:
        read = _describe(sched, app_id)
    except Exception as e:  # the view's final state stands; the read is a refinement
        log.warning("reading the final status of %s failed (%s)", event.app_handle, e)
        return event
    if read is None or not read.state.is_terminal():
        return event
    return dataclasses.replace(event, state=read.state, status=read,
                               msg=read.msg or event.msg)


class _Reconciler:
    """Drives ``reconcile`` of the followed apps on change, retrying the ones that failed."""

    def __init__(self, pool: SchedulerPool) -> None:
        self._pool = pool
        self._failed: set[AppHandle] = set()

    def run(self, handle: AppHandle) -> None:
        sched, app_id = self._pool.for_handle(handle)
        try:
            sched.reconcile(app_id)
            self._failed.discard(handle)
        except Exception as e:  # retried on the next tick; the status is still read
            log.warning("reconcile of %s failed (%s); retrying", handle, e)
            self._failed.add(handle)

    def retry(self) -> None:
        for handle in sorted(self._failed):
            self.run(handle)


def _follow(
    pool: SchedulerPool, sub: Subscription, handles: Iterable[AppHandle], chains: Chains | None
) -> ChainFollower | None:
    """Follows the apps; logical ones (``chain://``) through a :class:`ChainFollower`."""
    tracker = None
    for handle in dict.fromkeys(handles):
        if chains is not None and is_chain_handle(handle):
            tracker = tracker or _tracker(pool, chains, sub)
            tracker.add(handle)
            continue
        sched, app_id = pool.for_handle(handle)
        sub.follow(sched, app_id, ref=handle)
    return tracker


def _tracker(pool: SchedulerPool, chains: Chains, sub: Subscription | AsyncSubscription
             ) -> ChainFollower:  # fmt: skip
    from tether.runner.chain_watch import ChainFollower  # loaded when a chain is followed

    return ChainFollower(pool, chains, sub)


def _sliced(timeout: float, tracker: ChainFollower | None) -> float:
    """The longest single wait: ``timeout``, or less when a chain's next attempt is due."""
    due = tracker.due_in() if tracker is not None else None
    return timeout if due is None else min(timeout, due)


class AppWatch:
    """One subscription held open across many short waits for the same apps.

    For a caller that must look up between waits (a task that checks for a stop request,
    a log pump): each :meth:`next` waits at most its ``timeout`` without giving up the
    subscription, so the apps stay followed (one view, no re-subscription) for the whole
    follow. :func:`watch` is this in a loop. Close it (or use it as a context manager).

    Args:
        pool: The runner (its schedulers).
        handles: The apps.
        wait_interval: Seconds between retries of a reconcile that failed.
        hub: The hub (default: the process's).
        chains: The runner's logical jobs, when a handle is one (see
            :mod:`tether.runner.chain_watch`).
    """

    def __init__(
        self,
        pool: SchedulerPool,
        handles: Iterable[AppHandle],
        wait_interval: float = 10.0,
        hub: WatchHub | None = None,
        chains: Chains | None = None,
    ) -> None:
        self._pool = pool
        self._wait_interval = wait_interval
        self._reconciler = _Reconciler(pool)
        self._sub = Subscription(hub)
        try:
            self._tracker = _follow(pool, self._sub, handles, chains)
        except BaseException:
            self._sub.close()
            raise

    def __enter__(self) -> AppWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open(self) -> bool:
        """Whether an app is still followed (not every one has been heard final)."""
        return bool(self._sub.open) or (self._tracker is not None and self._tracker.busy)

    def next(self, timeout: float | None = None) -> AppEvent | None:
        """The next change of an app, waiting at most ``timeout`` seconds.

        Each app's current state comes first, then its changes; its final state exactly
        once, with the status a direct read gives.

        Args:
            timeout: The longest wait (None: until a change comes).

        Returns:
            The change, or None when none came (or every app is final already).

        Raises:
            WatchReadError: When an app's backend view cannot be read (see the module docs).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        tracker = self._tracker
        while self.open:
            ready = tracker.pop() if tracker is not None else None
            if ready is not None:
                return ready
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ev = self._sub.get(_sliced(
                self._wait_interval if left is None else min(self._wait_interval, left), tracker
            ))
            if ev is None:
                self._reconciler.retry()
                if tracker is not None:
                    tracker.tick()
                continue
            _readable(ev)
            due = ev.response is not None and ev.response.actions_due
            if due or (ev.final and not ev.gone):
                self._reconciler.run(str(ev.ref))
            out = _confirmed(self._pool, ev) if ev.final and not ev.gone else _app_event(ev)
            return tracker.translate(ev.ref, out) if tracker is not None else out
        return None

    def close(self) -> None:
        """Releases the subscription (idempotent)."""
        self._sub.close()


def watch(
    pool: SchedulerPool,
    handles: Iterable[AppHandle],
    timeout: float | None = None,
    wait_interval: float = 10.0,
    hub: WatchHub | None = None,
    chains: Chains | None = None,
) -> Iterator[AppEvent]:
    """Each change of the apps, until every one is final or ``timeout`` passed.

    Each app's current state comes first, then its changes; its final state exactly once.

    Args:
        pool: The runner (its schedulers).
        handles: The apps.
        timeout: The longest time in all, in seconds (None: no limit).
        wait_interval: Seconds between retries of a reconcile that failed.
        hub: The hub (default: the process's).
        chains: The runner's logical jobs, when a handle is one.

    Yields:
        The changes.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with AppWatch(pool, handles, wait_interval, hub, chains) as w:
        while w.open:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            ev = w.next(left)
            if ev is not None:
                yield ev


async def awatch(
    pool: SchedulerPool,
    handles: Iterable[AppHandle],
    timeout: float | None = None,
    wait_interval: float = 10.0,
    hub: WatchHub | None = None,
    chains: Chains | None = None,
) -> AsyncIterator[AppEvent]:
    """:func:`watch` on an asyncio event loop: one :class:`AsyncSubscription`, no thread.

    Scheduler calls (resolving the handles, ``reconcile``, a logical job's next attempt)
    run in worker threads, so the loop never blocks on a backend; any number of these on
    one loop share the hub's views.

    Args:
        pool: The runner (its schedulers).
        handles: The apps.
        timeout: The longest time in all, in seconds (None: no limit).
        wait_interval: Seconds between retries of a reconcile that failed.
        hub: The hub (default: the process's).
        chains: The runner's logical jobs, when a handle is one.

    Yields:
        The changes: each app's current state first, its final one exactly once.
    """
    import asyncio  # here: the synchronous followers must not load it (see subscription.py)

    reconciler = _Reconciler(pool)
    wanted = list(dict.fromkeys(handles))
    logical = [h for h in wanted if chains is not None and is_chain_handle(h)]
    targets = await asyncio.to_thread(_resolve_all, pool, [h for h in wanted if h not in logical])
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    async with AsyncSubscription(hub) as sub:
        for handle, (sched, app_id) in targets.items():
            sub.follow(sched, app_id, ref=handle)
        tracker = _tracker(pool, chains, sub) if chains is not None and logical else None
        if tracker is not None:
            for handle in logical:
                await asyncio.to_thread(tracker.add, handle)
        while sub.open or (tracker is not None and tracker.busy):
            ready = tracker.pop() if tracker is not None else None
            if ready is not None:
                yield ready
                continue
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            ev = await sub.get(_sliced(
                wait_interval if left is None else min(wait_interval, left), tracker
            ))
            if ev is None:
                await asyncio.to_thread(reconciler.retry)
                if tracker is not None:
                    await asyncio.to_thread(tracker.tick)
                continue
            _readable(ev)
            due = ev.response is not None and ev.response.actions_due
            if due or (ev.final and not ev.gone):
                await asyncio.to_thread(reconciler.run, str(ev.ref))
            if ev.final and not ev.gone:
                out = await asyncio.to_thread(_confirmed, pool, ev)
            else:
                out = _app_event(ev)
            if tracker is not None:
                out = await asyncio.to_thread(tracker.translate, ev.ref, out)
            yield out


def _resolve_all(
    pool: SchedulerPool, handles: Iterable[AppHandle]
) -> dict[AppHandle, tuple[Scheduler[Any], str]]:
    """Each distinct handle's scheduler and app id (may build a scheduler: a worker thread)."""
    return {handle: pool.for_handle(handle) for handle in dict.fromkeys(handles)}


def wait_any(
    pool: SchedulerPool,
    handles: Iterable[AppHandle],
    timeout: float | None = None,
    wait_interval: float = 10.0,
    hub: WatchHub | None = None,
    chains: Chains | None = None,
) -> AppEvent | None:
    """The first of the apps to be final (ended, or gone).

    Args:
        pool: The runner.
        handles: The apps.
        timeout: The longest wait, in seconds (None: no limit).
        wait_interval: Seconds between retries of a reconcile that failed.
        hub: The hub (default: the process's).
        chains: The runner's logical jobs, when a handle is one.

    Returns:
        Its final event, or None when none ended within ``timeout``.
    """
    for ev in watch(pool, handles, timeout, wait_interval, hub, chains):
        if ev.final:
            return ev
    return None


def wait(
    pool: SchedulerPool,
    handle: AppHandle,
    wait_interval: float = 10.0,
    timeout: float | None = None,
    hub: WatchHub | None = None,
) -> AppStatus | None:
    """Blocks until the app is finished (see :meth:`tether.runner.Runner.wait`).

    Args:
        pool: The runner.
        handle: The app.
        wait_interval: Seconds between retries of a reconcile that failed.
        timeout: Give up after this many seconds and return the last status.
        hub: The hub (default: the process's).

    Returns:
        The final status; the last one heard after ``timeout``; None when the app does not
        exist (or was deleted while waiting).
    """
    last: AppEvent | None = None
    for ev in watch(pool, [handle], timeout, wait_interval, hub):
        last = ev
    if last is None:  # timed out before the first read: read it now
        return status(pool, handle, hub)
    return last.status


def status(pool: SchedulerPool, handle: AppHandle, hub: WatchHub | None = None) -> AppStatus | None:
    """The app's status: from the hub's view while this process reads the unfinished app
    through a watch or a scan, else one direct read.

    Args:
        pool: The runner.
        handle: The app.
        hub: The hub (default: the process's).

    Returns:
        The status, or None when the scheduler does not know the app.
    """
    sched, app_id = pool.for_handle(handle)
    if sched.capabilities.follow.mode != FollowMode.DESCRIBE_EACH:
        ev = (hub or get_hub()).current(sched, app_id)
        if ev is not None and not ev.gone:
            return ev.status()
    return _describe(sched, app_id)


def _describe(sched: Scheduler[Any], app_id: str) -> AppStatus | None:
    desc = sched.describe(app_id)
    if desc is None:
        return None
    return AppStatus(
        state=desc.state,
        num_restarts=desc.num_restarts,
        msg=desc.msg if desc.msg != "<NONE>" else "",
        structured_error_msg=desc.structured_error_msg,
        ui_url=desc.ui_url,
        roles=desc.roles_statuses,
        failure=desc.failure,
    )
