"""Follow many jobs at the cost of one: the process's watch hub.

One :class:`WatchHub` per process keeps, for each backend connection (a
:class:`WatchKey`: backend, cluster or context, namespace or partition, region), one shared
view of every job followed there, fed by the backend's cheapest way to read many jobs (its
``Capabilities.follow``: a Kubernetes list + watch, one batched poll, one state-directory
scan, or one ``describe`` per job as the fallback), and hands each change to any number of
subscribers. A job missing from a view is confirmed by a direct read before anyone hears it
ended; reads that keep failing are told to the subscribers (``JobEvent.error``), never left
as a silent wait. See ``docs/scale.md``.

Subscribe with :class:`Subscription` (threads) or :class:`AsyncSubscription` (asyncio)::

    with Subscription() as sub:
        sub.follow(scheduler, app_id, ref=handle)
        for event in sub.events(timeout=600):
            print(event.ref, event.state, event.msg)
"""

from tether.schedulers.watch.events import (
    FailurePolicy,
    FollowTarget,
    JobEvent,
    Reader,
    ViewError,
    WatchKey,
    WatchReadError,
    view_target,
)
from tether.schedulers.watch.hub import WatchHub, get_hub, resolve_target
from tether.schedulers.watch.subscription import AsyncSubscription, Subscription

__all__ = [
    "AsyncSubscription",
    "FailurePolicy",
    "FollowTarget",
    "JobEvent",
    "Reader",
    "Subscription",
    "ViewError",
    "WatchHub",
    "WatchKey",
    "WatchReadError",
    "get_hub",
    "resolve_target",
    "view_target",
]
