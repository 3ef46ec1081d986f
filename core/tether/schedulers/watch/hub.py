"""The process's watch hub: one shared view per backend connection, any number of subscribers.

For each :class:`~tether.schedulers.watch.events.WatchKey` the hub keeps one view of every
job followed there, read by one :class:`~tether.schedulers.watch.driver.Driver` thread
through the backend's reader, and hands each change to the subscribers of that job:

* a subscriber that follows a job already in a view hears its current state at once;
* a subscriber hears a job's terminal state (or that it is gone) exactly once, and nothing
  about that job after it;
* a job is only ever "gone" after the backend said so on a direct read;
* while a view's reads keep failing past the hub's
  :class:`~tether.schedulers.watch.events.FailurePolicy`, each of its jobs gets a non-final
  event carrying the :class:`~tether.schedulers.watch.events.ViewError` (its last known
  state unchanged), and an event without it once a read succeeds: a follower is never left
  waiting in silence on a backend it cannot read;
* a view whose last subscriber left is dropped, and its thread and streams stopped (the
  process's hub keeps a job :data:`LINGER_S` seconds after its last subscriber left, so
  that a caller that waits in short slices, such as ``tether wait``'s progress loop, does
  not reopen the view each time).

Subscribers hand the hub a ``deliver`` function that must not block (a queue's ``put``, a
loop's ``call_soon_threadsafe``); it is called on the view's thread, in order. Use
:class:`~tether.schedulers.watch.subscription.Subscription` (threads) or
:class:`~tether.schedulers.watch.subscription.AsyncSubscription` (asyncio) rather than the
hub's methods directly.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.watch.driver import Driver
from tether.schedulers.watch.events import (
    GONE_MSG,
    FailurePolicy,
    FollowTarget,
    JobEvent,
    Reader,
    ViewError,
    WatchKey,
)
from tether.specs import AppState

log: logging.Logger = logging.getLogger(__name__)

Deliver = Callable[[JobEvent], None]
Ref = tuple[WatchKey, str]


@dataclass
class _Entry:
    """The shared state of one followed job."""

    event: JobEvent | None = None
    subs: set[int] = field(default_factory=set)
    idle_since: float | None = None  # when its last subscriber left (it lingers)


@dataclass
class _View:
    """One key's jobs and the thread that reads them."""

    driver: Driver
    entries: dict[str, _Entry] = field(default_factory=dict)


@dataclass
class _Sub:
    """One subscriber: how to reach it and what it heard."""

    deliver: Deliver
    refs: dict[Ref, Hashable] = field(default_factory=dict)
    heard: dict[Ref, tuple[Any, ...]] = field(default_factory=dict)
    ended: set[Ref] = field(default_factory=set)


def _signature(ev: JobEvent) -> tuple[Any, ...]:
    resp = ev.response
    restarts = resp.num_restarts if resp is not None else None
    due = resp.actions_due if resp is not None else False
    return (ev.state, ev.msg, restarts, due, ev.gone, ev.error)


def resolve_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """Where ``app_id`` of ``scheduler`` is followed, from the backend's declared ``follow``.

    Args:
        scheduler: The app's scheduler.
        app_id: The app.

    Returns:
        The target (its key, and how to build the reader).
    """
    spec = scheduler.capabilities.follow
    if spec.source is None:
        from tether.schedulers.watch.poll import follow_target

        return follow_target(scheduler, app_id, spec.interval)
    module = importlib.import_module(spec.source)
    target: FollowTarget = module.follow_target(scheduler, app_id)
    return target


LINGER_S = 30.0
"""Seconds the process's hub keeps following a job after its last subscriber left."""


class WatchHub:
    """Shared views of followed jobs (see the module docs); one per process (:func:`get_hub`).

    Args:
        resolve: Maps a scheduler and app id to its follow target (tests may pass their own).
        linger: Seconds a job stays followed after its last subscriber left (0: none).
        failing: When a view's failing reads are reported to its subscribers.
    """

    def __init__(
        self,
        resolve: Callable[[Scheduler[Any], str], FollowTarget] = resolve_target,
        linger: float = 0.0,
        failing: FailurePolicy = FailurePolicy(),  # noqa: B008 (frozen: shared safely)
    ) -> None:
        self._resolve = resolve
        self._linger = linger
        self._failing = failing
        self._lock = threading.RLock()
        self._views: dict[WatchKey, _View] = {}
        self._subs: dict[int, _Sub] = {}
        self._ids = itertools.count(1)

    # ---- subscribers -------------------------------------------------------------------
    def subscribe(self, deliver: Deliver) -> int:
        """Registers a subscriber that follows nothing yet.

        Args:
            deliver: Receives the subscriber's events (must not block).

        Returns:
            The subscriber's id.
        """
        with self._lock:
            sub_id = next(self._ids)
            self._subs[sub_id] = _Sub(deliver)
            return sub_id

    def follow(
        self, sub_id: int, scheduler: Scheduler[Any], app_id: str, ref: Hashable = None
    ) -> WatchKey:
        """Makes a subscriber follow a job; it hears the job's current state at once if known.

        Args:
            sub_id: The subscriber.
            scheduler: The job's scheduler.
            app_id: The job.
            ref: What the subscriber's events name the job by (default: the app id).

        Returns:
            The key of the view that follows it.

        Raises:
            KeyError: When the subscriber was released.
        """
        target = self._resolve(scheduler, app_id)
        key = target.key
        with self._lock:
            sub = self._subs[sub_id]
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = _View(self._new_driver(target))
                view.driver.start()
            entry = view.entries.setdefault(app_id, _Entry())
            entry.subs.add(sub_id)
            entry.idle_since = None
            sub.refs[(key, app_id)] = app_id if ref is None else ref
            if entry.event is not None:
                self._deliver(sub, entry.event)
            else:
                view.driver.wake()
        return key

    def unfollow(self, sub_id: int, key: WatchKey, app_id: str) -> None:
        """Stops a subscriber following one job (a no-op when it does not).

        Args:
            sub_id: The subscriber.
            key: The job's view.
            app_id: The job.
        """
        with self._lock:
            sub = self._subs.get(sub_id)
            if sub is not None:
                for d in (sub.refs, sub.heard):
                    d.pop((key, app_id), None)
                sub.ended.discard((key, app_id))
            self._drop(sub_id, key, app_id)

    def release(self, sub_id: int) -> None:
        """Forgets a subscriber and every job only it followed (idempotent).

        Args:
            sub_id: The subscriber.
        """
        with self._lock:
            sub = self._subs.pop(sub_id, None)
            if sub is None:
                return
            for key, app_id in list(sub.refs):
                self._drop(sub_id, key, app_id)

    # ---- reading the views -------------------------------------------------------------
    def current(self, scheduler: Scheduler[Any], app_id: str) -> JobEvent | None:
        """The state of a job a view is reading now, without any request.

        A job that ended is no longer read (it may have been deleted since): None for it, as
        for a job no view follows, or one whose view's reads are failing.

        Args:
            scheduler: The job's scheduler.
            app_id: The job.

        Returns:
            The last event of the job (its ``ref`` is the app id), or None.
        """
        key = self._resolve(scheduler, app_id).key
        with self._lock:
            view = self._views.get(key)
            entry = view.entries.get(app_id) if view is not None else None
            ev = entry.event if entry is not None else None
            if ev is None or ev.final or ev.error is not None:
                return None
            return ev

    def reader(
        self, scheduler: Scheduler[Any], app_id: str, timeout: float = 30.0
    ) -> Reader | None:
        """The reader of the view that follows a job, for what its cache holds beyond
        states (a Kubernetes log stream reads its replica's pods there, with no request).

        Follow the job first (a :class:`~tether.schedulers.watch.subscription.Subscription`)
        and keep following it while using the reader: the view stops with its last follower.

        Args:
            scheduler: The job's scheduler.
            app_id: The job.
            timeout: The longest wait for the view's reader to start, in seconds.

        Returns:
            The reader; None when no view follows the job or its reader did not start.
        """
        key = self._resolve(scheduler, app_id).key
        with self._lock:
            view = self._views.get(key)
        return view.driver.reader(timeout) if view is not None else None

    def stats(self) -> dict[str, int]:
        """Counts of views, followed jobs, subscribers and live view threads (for tests).

        Returns:
            ``views``, ``jobs``, ``subscribers``, ``refs`` (followed pairs).
        """
        with self._lock:
            return {
                "views": len(self._views),
                "jobs": sum(len(v.entries) for v in self._views.values()),
                "subscribers": len(self._subs),
                "refs": sum(len(s.refs) for s in self._subs.values()),
            }

    def close(self) -> None:
        """Stops every view and forgets every subscriber."""
        with self._lock:
            views = list(self._views.values())
            self._views.clear()
            self._subs.clear()
        for view in views:
            view.driver.stop()

    # ---- internals ---------------------------------------------------------------------
    def _new_driver(self, target: FollowTarget) -> Driver:
        key = target.key

        def followed() -> frozenset[str]:
            return self._followed(key)

        def publish(app_id: str, resp: DescribeAppResponse | None) -> None:
            self._publish(key, app_id, resp)

        def report(error: ViewError | None) -> None:
            self._report(key, error)

        return Driver(target, followed, publish, report, self._failing)

    def _followed(self, key: WatchKey) -> frozenset[str]:
        with self._lock:
            view = self._views.get(key)
            if view is None:
                return frozenset()
            now = time.monotonic()
            for app_id, e in list(view.entries.items()):
                if e.idle_since is not None and now - e.idle_since >= self._linger:
                    del view.entries[app_id]
            if not view.entries:
                del self._views[key]
                view.driver.stop()
                return frozenset()
            return frozenset(
                a for a, e in view.entries.items() if e.event is None or not e.event.final
            )

    def _publish(self, key: WatchKey, app_id: str, resp: DescribeAppResponse | None) -> None:
        with self._lock:
            view = self._views.get(key)
            entry = view.entries.get(app_id) if view is not None else None
            if entry is None or (entry.event is not None and entry.event.final):
                return
            if resp is None:
                known = entry.event is not None and entry.event.response is not None
                last = entry.event.state.name if known and entry.event else None
                msg = GONE_MSG.format(backend=key.backend)
                msg += f"; its last state was {last}" if last else "; it was never seen"
                ev = JobEvent(app_id, key, app_id, AppState.UNKNOWN, msg, None, gone=True)
            else:
                msg = resp.msg if resp.msg != "<NONE>" else ""
                ev = JobEvent(app_id, key, app_id, resp.state, msg, resp)
            entry.event = ev
            for sub_id in entry.subs:
                self._deliver(self._subs[sub_id], ev)

    def _report(self, key: WatchKey, error: ViewError | None) -> None:
        """Tells every unfinished job of a view that its reads are failing (``error``) or,
        with None, that they recovered (jobs the last read did not show, unchanged)."""
        with self._lock:
            view = self._views.get(key)
            for app_id, entry in list(view.entries.items()) if view is not None else []:
                last = entry.event
                if last is None:
                    if error is None:
                        continue
                    ev = JobEvent(app_id, key, app_id, AppState.UNKNOWN, error=error)
                elif last.final or (last.error is None and error is None):
                    continue
                elif error is None and last.response is None:
                    entry.event = None  # never read yet: nothing to tell until it is
                    continue
                else:
                    ev = dataclasses.replace(last, error=error)
                entry.event = ev
                for sub_id in entry.subs:  # heard once per error text (see _signature)
                    self._deliver(self._subs[sub_id], ev)

    def _deliver(self, sub: _Sub, ev: JobEvent) -> None:
        ref = (ev.key, ev.app_id)
        if ref in sub.ended or ref not in sub.refs:
            return
        sig = _signature(ev)
        last = sub.heard.get(ref)
        if last == sig:
            return
        sub.heard[ref] = sig
        if ev.final:
            sub.ended.add(ref)
        previous = last[0] if last is not None else None
        out = dataclasses.replace(ev, ref=sub.refs[ref], previous=previous)
        try:
            sub.deliver(out)
        except Exception:  # a subscriber's failure is its own; the view goes on
            log.exception("delivering %s to a subscriber failed", ev.app_id)

    def _drop(self, sub_id: int, key: WatchKey, app_id: str) -> None:
        view = self._views.get(key)
        entry = view.entries.get(app_id) if view is not None else None
        if view is None or entry is None:
            return
        entry.subs.discard(sub_id)
        if not entry.subs:
            if self._linger > 0:  # kept (and read) a while for the next subscriber
                entry.idle_since = time.monotonic()
                return
            del view.entries[app_id]
        if not view.entries:
            del self._views[key]
            view.driver.stop()


_HUB: WatchHub | None = None
_HUB_LOCK = threading.Lock()


def get_hub() -> WatchHub:
    """The process's hub (made on first use; a forked child gets a fresh one).

    Returns:
        The hub.
    """
    global _HUB
    with _HUB_LOCK:
        if _HUB is None:
            _HUB = WatchHub(linger=LINGER_S)
        return _HUB


def _forget_after_fork() -> None:
    global _HUB, _HUB_LOCK
    _HUB = None  # its threads did not survive the fork
    _HUB_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
