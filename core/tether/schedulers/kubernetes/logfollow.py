"""A followed log's view of its app: the process's watch hub, read with no request.

:func:`cached_app` follows an app in the hub (:mod:`tether.schedulers.watch`), which keeps
one list + watch of the namespace's Jobs and pods for every follower in the process, and
hands :func:`~tether.schedulers.kubernetes.logs.followed_lines` the app's objects from that
cache: a log stream whose pod does not exist yet or is Pending waits for the cache to change
instead of reading the apiserver.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol, runtime_checkable

from tether.schedulers.api import Scheduler
from tether.schedulers.kubernetes.client import KubernetesApiError
from tether.schedulers.kubernetes.views import AppView
from tether.schedulers.watch import Subscription, get_hub

READER_START_S = 60.0
"""The longest wait for the hub's view of the namespace to open its watches, in seconds."""


@runtime_checkable
class NamespaceCache(Protocol):
    """What a log stream reads of the namespace's reader
    (:class:`~tether.schedulers.kubernetes.watch.KubeReader`, which imports the scheduler:
    named here by what it does)."""

    def generation(self, name: str) -> tuple[int, int]:
        """A mark of the cache's state for one app."""

    def wait_change(self, name: str, mark: object, timeout: float) -> bool:
        """Waits until an app's cached objects changed since ``mark``."""

    def app_view(self, name: str, timeout: float = 60.0) -> AppView | None:
        """One app analyzed from the cache."""

    def pod(self, name: str) -> dict[str, Any] | None:
        """A pod as cached."""


class CachedApp:
    """One app as the watch hub's view of its namespace holds it (an ``AppCache``).

    Args:
        sub: The subscription that keeps the app followed (closed with this).
        reader: The namespace's reader.
        name: The app's Kubernetes name.
    """

    def __init__(self, sub: Subscription, reader: NamespaceCache, name: str) -> None:
        self._sub = sub
        self._reader = reader
        self._name = name

    def mark(self) -> Hashable:
        """A mark of the app's cached objects, for :meth:`wait`."""
        return self._reader.generation(self._name)

    def view(self) -> AppView | None:
        """The app analyzed from the cache (None: none of its objects exists)."""
        return self._reader.app_view(self._name)

    def pod(self, name: str) -> dict[str, Any] | None:
        """A pod of the namespace as cached (None: it does not exist)."""
        return self._reader.pod(name)

    def wait(self, mark: Hashable, timeout: float) -> bool:
        """Waits until the app's objects changed since ``mark``; returns whether they did."""
        return self._reader.wait_change(self._name, mark, timeout)

    def close(self) -> None:
        """Stops following the app (idempotent)."""
        self._sub.close()


def cached_app(scheduler: Scheduler[Any], app_id: str, name: str) -> CachedApp:
    """Follows an app in the process's watch hub, for a log stream to wait on.

    Args:
        scheduler: The app's scheduler (a ``KubernetesScheduler``).
        app_id: ``{namespace}:{name}``.
        name: The app's Kubernetes name.

    Returns:
        The app's cached view (close it when done).

    Raises:
        KubernetesApiError: When the hub's view of the namespace did not start.
    """
    sub = Subscription()
    try:
        sub.follow(scheduler, app_id)
        reader = get_hub().reader(scheduler, app_id, READER_START_S)
        if not isinstance(reader, NamespaceCache):
            raise KubernetesApiError(0, f"the watch of {app_id}'s namespace did not start")
        return CachedApp(sub, reader, name)
    except BaseException:
        sub.close()
        raise
