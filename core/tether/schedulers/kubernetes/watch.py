"""The watch hub's view of one namespace: every tether app in it, from one cache.

:func:`follow_target` puts an app in the view of its (kubeconfig, context, namespace). The
view's :class:`KubeReader` keeps one :class:`~tether.schedulers.kubernetes.reflector.Reflector`
(a list + watch, see there) per kind tether reads (Jobs, pods, and the gang objects where
the cluster serves them). While every kind's list or watch is down (or one that never
listed is), reads of the view fail with its error (the hub tells the followers when that
lasts). Reads of the view analyze the cached objects with the same
:func:`~tether.schedulers.kubernetes.status.analyze` as ``describe``: no request per app. An
app the cache does not show is confirmed with :func:`fetch_app`, and so is an app the cache
shows ended: the Job and pod watches are separate streams, and after a reconnect the Job's
end can arrive before its pods' (the failure message would then be the Job's
``BackoffLimitExceeded`` instead of the container's exit code). One read per app end.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timezone
from typing import Any

from tether.schedulers import interrupt
from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.kubernetes.client import (
    KubeApi,
    KubernetesApiError,
    load_api_client,
    stream_client,
)
from tether.schedulers.kubernetes.fetch import (
    appwrapper_path,
    fetch_app,
    jobs_path,
    pods_path,
    volcano_path,
)
from tether.schedulers.kubernetes.naming import ANN_GANG
from tether.schedulers.kubernetes.options import GANG_APPWRAPPER
from tether.schedulers.kubernetes.reflector import Reflector
from tether.schedulers.kubernetes.scheduler import KubernetesScheduler
from tether.schedulers.kubernetes.status import analyze
from tether.schedulers.kubernetes.views import AppView, describe_response
from tether.schedulers.watch.events import FollowTarget, view_target
from tether.specs.status import is_terminal

log: logging.Logger = logging.getLogger(__name__)

REANALYZE_S = 60.0
"""Seconds after which every followed app is analyzed again, changed or not (an image pull
that has failed for ``image_pull_timeout`` turns FAILED with no object changing)."""

KINDS: tuple[tuple[str, Callable[[str], str], bool], ...] = (
    ("jobs", jobs_path, False),
    ("pods", pods_path, False),
    ("vcjobs", volcano_path, True),
    ("aws", appwrapper_path, True),
)
"""(name, collection path of a namespace, optional: the cluster may not serve the kind)."""


class KubeReader:
    """The shared view of one namespace (see the module docs).

    Args:
        namespace: The namespace.
        make_api: Returns the API and a function that closes it.
    """

    def __init__(
        self, namespace: str, make_api: Callable[[], tuple[KubeApi, Callable[[], None]]]
    ) -> None:
        self.namespace = namespace
        self._make_api = make_api
        self._api: KubeApi | None = None
        self._close: Callable[[], None] = lambda: None
        self._stopped = threading.Event()
        self.reflectors: dict[str, Reflector] = {}
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._all_dirty = True
        self._analyzed_at = 0.0
        self._views: dict[str, DescribeAppResponse] = {}
        self._ended: dict[str, DescribeAppResponse] = {}  # ends confirmed by a direct read
        self._wake: Callable[[], None] = lambda: None
        self._changes = threading.Condition()
        self._generation = 0  # counts changes of any app (and relists)
        self._app_generation: dict[str, int] = {}
        self.analyses = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Opens the lists + watches.

        Args:
            wake: Called after each change.
        """
        self._api, self._close = self._make_api()
        self._wake = wake
        for kind, path, optional in KINDS:
            ns_path = path(self.namespace)
            ref = Reflector(self._api, kind, ns_path, optional, self._changed, self._stopped)
            self.reflectors[kind] = ref
            ref.start()

    def _changed(self, app: str | None) -> None:
        with self._lock:
            if app is None:
                self._all_dirty = True
            else:
                self._dirty.add(app)
        with self._changes:
            if app is None:
                self._generation += 1
            else:
                self._app_generation[app] = self._app_generation.get(app, 0) + 1
            self._changes.notify_all()
        self._wake()

    def generation(self, name: str) -> tuple[int, int]:
        """A mark of the cache's state for one app, for :meth:`wait_change`.

        Args:
            name: The app's Kubernetes name.

        Returns:
            The mark.
        """
        with self._changes:
            return self._generation, self._app_generation.get(name, 0)

    def wait_change(self, name: str, mark: object, timeout: float) -> bool:
        """Waits until an app's cached objects changed since ``mark`` (no request).

        Args:
            name: The app's Kubernetes name.
            mark: What :meth:`generation` returned.
            timeout: The longest wait, in seconds.

        Returns:
            Whether they changed (or the reader stopped).

        Raises:
            Stopped: When the calling thread's log consumer stopped (see
                :mod:`tether.schedulers.interrupt`): the wait ends at once.
        """
        return interrupt.wait_for(
            self._changes,
            lambda: self._stopped.is_set()
            or (self._generation, self._app_generation.get(name, 0)) != mark,
            timeout,
        )

    def pod(self, name: str) -> dict[str, Any] | None:
        """A tether pod of the namespace as cached (no request).

        Args:
            name: The pod's name.

        Returns:
            The pod (shared: do not change it); None when the cache does not hold it.
        """
        return self.reflectors["pods"].get(name)

    def app_view(self, name: str, timeout: float = 60.0) -> AppView | None:
        """One app analyzed from the cache, pods included (no request).

        Args:
            name: The app's Kubernetes name.
            timeout: The longest wait for the first lists, in seconds.

        Returns:
            The view; None when the cache holds none of its objects.

        Raises:
            KubernetesApiError: When the first lists did not arrive in time, or the reader
                stopped.
        """
        deadline = time.monotonic() + timeout
        for ref in self.reflectors.values():
            if not ref.synced.wait(max(0.0, deadline - time.monotonic())):
                raise KubernetesApiError(0, f"the watch of {ref.path} has not listed yet")
        if self._stopped.is_set():
            raise KubernetesApiError(0, "the watch of the namespace stopped")
        kinds = {kind: ref.of_app(name) for kind, ref in self.reflectors.items()}
        return _app_view(self.namespace, name, kinds, datetime.now(timezone.utc))

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse] | None:
        """The followed apps the cache shows, analyzed; None before every first list is in.

        Only the apps whose objects changed since the last read are analyzed again, and all
        of them every :data:`REANALYZE_S` seconds (states that change with time alone).

        Args:
            app_ids: ``{namespace}:{name}`` of the followed apps.

        Returns:
            The apps with objects in the cache.

        Raises:
            KubernetesApiError: While the cache cannot be read: every kind's list or watch
                is down, or one that never listed is (a kind down after its list leaves its
                objects as they were, and the others are read on: a Job's end is heard,
                and confirmed by a direct read, while the pod watch is down).
        """
        self._raise_if_down()
        if not all(r.synced.is_set() for r in self.reflectors.values()):
            return None
        wanted = {app_id.partition(":")[2]: app_id for app_id in app_ids}
        now = time.monotonic()
        with self._lock:
            full = self._all_dirty or now - self._analyzed_at >= REANALYZE_S
            dirty, self._dirty, self._all_dirty = self._dirty, set(), False
        if full:
            self._analyzed_at = now
        self._views = {n: v for n, v in self._views.items() if n in wanted}
        self._ended = {n: v for n, v in self._ended.items() if n in wanted}
        stamp = datetime.now(timezone.utc)
        for name in wanted:
            if full or name in dirty or name not in self._views:
                self.analyses += 1
                kinds = {kind: ref.of_app(name) for kind, ref in self.reflectors.items()}
                resp = _analyze(self.namespace, name, kinds, stamp)
                if resp is None:
                    self._views.pop(name, None)
                    self._ended.pop(name, None)
                    continue
                if is_terminal(resp.state):
                    resp = self._confirm_end(wanted[name], resp)
                if resp is None:
                    self._views.pop(name, None)
                else:
                    self._views[name] = resp
        return {wanted[n]: v for n, v in self._views.items()}

    def _raise_if_down(self) -> None:
        served = [(r, r.error) for r in self.reflectors.values() if r.served]
        down = [(r, e) for r, e in served if e is not None]
        if down and (len(down) == len(served) or not all(r.synced.is_set() for r, _ in down)):
            error = down[0][1]  # raised anew each time: a traceback that never grows
            raise KubernetesApiError(error.status if error else 0, str(error))

    def _confirm_end(
        self, app_id: str, cached: DescribeAppResponse
    ) -> DescribeAppResponse | None:
        """An end the cache shows, as a direct read confirms it (once per app).

        Returns:
            The confirmed view; the view before when the read failed (tried again at the
            next read); the cached one when the objects are gone meanwhile.
        """
        name = app_id.partition(":")[2]
        if name in self._ended:
            return self._ended[name]
        try:
            fresh = self.confirm(app_id)
        except (KubernetesApiError, OSError) as e:
            log.warning("confirming the end of %s failed: %s", app_id, e)
            with self._lock:
                self._dirty.add(name)  # read again at the next round (no wake: no busy loop)
            return self._views.get(name)
        if fresh is None:
            return cached
        if is_terminal(fresh.state):
            self._ended[name] = fresh
        return fresh

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """Reads one app directly from the apiserver.

        Args:
            app_id: ``{namespace}:{name}``.

        Returns:
            Its description; None when none of its objects exists.
        """
        if self._api is None:
            raise KubernetesApiError(0, "the watch is not started")
        view = fetch_app(self._api, self.namespace, app_id.partition(":")[2])
        return describe_response(view) if view is not None else None

    def stop(self) -> None:
        """Ends the watches (their threads end at their next event or timeout) and closes
        the API client when the reader made it."""
        self._stopped.set()
        with self._changes:
            self._changes.notify_all()
        for ref in self.reflectors.values():
            ref.stop()
        self._close()


def _analyze(
    ns: str, name: str, kinds: Mapping[str, list[dict[str, Any]]], now: datetime
) -> DescribeAppResponse | None:
    """Describes an app from its cached objects as ``describe`` does from fresh ones."""
    view = _app_view(ns, name, kinds, now)
    return describe_response(view) if view is not None else None


def _app_view(
    ns: str, name: str, kinds: Mapping[str, list[dict[str, Any]]], now: datetime
) -> AppView | None:
    """Analyzes an app's cached objects as :func:`fetch_app` does its fresh ones."""
    jobs = kinds.get("jobs", [])
    gang = jobs[0]["metadata"].get("annotations", {}).get(ANN_GANG) if jobs else None
    vcjob = aw = None
    if not jobs or gang == GANG_APPWRAPPER:
        if gang is None:
            vcjob = next(iter(kinds.get("vcjobs", [])), None)
        if vcjob is None:
            aw = next(iter(kinds.get("aws", [])), None)
    if not jobs and vcjob is None and aw is None:
        return None
    return analyze(ns, name, jobs, kinds.get("pods", []), vcjob, aw, now)


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the app's namespace on the scheduler's cluster.

    Args:
        scheduler: A :class:`KubernetesScheduler`.
        app_id: ``{namespace}:{name}`` (or a bare name in the scheduler's namespace).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    def connection(s: KubernetesScheduler) -> str:
        client = s._client if not s._own_client else None
        if client is not None:
            return f"client@{id(client):x}"
        where = s._kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        return f"{where}#{s._context or ''}"

    def make_reader(s: KubernetesScheduler) -> KubeReader:
        client = s._client if not s._own_client else None
        kubeconfig, context = s._kubeconfig, s._context

        def make_api() -> tuple[KubeApi, Callable[[], None]]:
            base = client if client is not None else load_api_client(kubeconfig, context)
            own = stream_client(base)

            def close() -> None:
                own.close()
                if base is not client:
                    base.close()

            return KubeApi(own), close

        return KubeReader(s._parse_app_id(app_id)[0], make_api)

    return view_target(
        scheduler, KubernetesScheduler, connection, make_reader,
        lambda s: s._parse_app_id(app_id)[0],
    )  # fmt: skip
