"""Reading a replica's log through the apiserver, following it across pod retries.

:func:`replica_log` is the scheduler's ``log_iter``: it checks the role and replica, then
reads the log of the replica's current pod once (:func:`replica_lines`), or, when tailing,
follows it and the pods that replace it after a retry (:func:`followed_lines`). A followed
log never polls: while the replica's pod does not exist or has not started it waits on the
watch hub's cached view of the app, and each started pod's log is one long-lived ``follow``
request (:func:`pod_lines`, with timestamps so that a time window filters lines and a dropped
stream is reopened from its last line without repeating or losing any).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any, Protocol

from tether.schedulers.api import filter_regex
from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError, core_path
from tether.schedulers.kubernetes.fields import parse_time
from tether.schedulers.kubernetes.views import AppView, Replica
from tether.schedulers.watch.backoff import Backoff
from tether.specs.status import is_terminal

log: logging.Logger = logging.getLogger(__name__)

LOG_READ_TIMEOUT_S = 300.0
"""Seconds a followed log may stay silent before its stream is reopened (a dead link)."""

WAIT_S = 30.0
"""The longest wait on the watch hub's view before a waiting log looks again (no request)."""

SETTLE_S = 5.0
"""The longest wait for the view to show a pod's container ended after its log stream ended
cleanly (the stream is reopened after it, from its last line, when the view still shows it
running)."""


def _as_aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts if ts.tzinfo is not None else ts.astimezone()


def replica_log(
    fetch: Callable[[str, str], AppView | None],
    kube: Callable[[], KubeApi],
    app_id: str,
    ns: str,
    name: str,
    role_name: str,
    k: int,
    regex: str | None,
    since: datetime | None,
    until: datetime | None,
    should_tail: bool,
    follow_app: Callable[[], AppCache] | None = None,
) -> Iterable[str]:
    """The log lines of replica ``k`` of a role (the scheduler's ``log_iter``).

    Args:
        fetch: Reads the app (``(namespace, name)`` -> its view, or None when gone).
        kube: Returns the API.
        app_id: The app (for messages).
        ns: Its namespace.
        name: Its Kubernetes name.
        role_name: The role.
        k: The replica index.
        regex: Only lines matching it, when given.
        since: Lines before this time are skipped (naive: local time).
        until: Reading stops at this time (naive: local time).
        should_tail: Whether to follow the replica until it ends.
        follow_app: Follows the app in the process's watch hub (what a tailing read waits
            on); without it a tailing read reads the current pod once.

    Returns:
        The lines, read lazily.

    Raises:
        ValueError: When the app, role or replica does not exist (naming what exists).
    """
    view = fetch(ns, name)
    if view is None:
        raise ValueError(f"no app {app_id!r} in namespace {ns!r}")
    roles = sorted({r.role for r in view.replicas})
    if role_name not in roles:
        raise ValueError(f"app {app_id!r} has no role {role_name!r}; roles: {roles}")
    ids = sorted(r.replica_id for r in view.replicas if r.role == role_name)
    if k not in ids:
        raise ValueError(f"role {role_name!r} of app {app_id!r} has replicas {ids}, not {k}")
    since, until = _as_aware(since), _as_aware(until)
    if should_tail and follow_app is not None:
        lines = followed_lines(
            follow_app, kube, ns, role_name, k, since, until,
            read_once=lambda: replica_lines(fetch, kube, ns, name, role_name, k, since, until),
        )  # fmt: skip
    else:
        lines = replica_lines(fetch, kube, ns, name, role_name, k, since, until)
    return filter_regex(regex, lines)


def _replica(view: AppView | None, role: str, k: int) -> Replica | None:
    if view is None:
        return None
    return next((r for r in view.replicas if r.role == role and r.replica_id == k), None)


class AppCache(Protocol):
    """One app as the process's watch hub keeps it (see
    :mod:`~tether.schedulers.kubernetes.logfollow`): reads and waits cost no request."""

    def mark(self) -> Hashable:
        """A mark of the app's cached objects, for :meth:`wait`."""

    def view(self) -> AppView | None:
        """The app analyzed from the cache (None: none of its objects exists)."""

    def pod(self, name: str) -> dict[str, Any] | None:
        """A pod of the namespace as cached (None: it does not exist)."""

    def wait(self, mark: Hashable, timeout: float) -> bool:
        """Waits until the app's objects changed since ``mark``; returns whether they did."""

    def close(self) -> None:
        """Stops following the app."""


def _uid(obj: dict[str, Any] | None) -> str:
    return str((obj or {}).get("metadata", {}).get("uid", ""))


def _started(pod: dict[str, Any]) -> bool:
    """Whether the pod's container started (its log can be read)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    return any(
        "running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {})
        for cs in status.get("containerStatuses") or []
    )


def _left(until: datetime | None) -> float | None:
    return None if until is None else (until - datetime.now(timezone.utc)).total_seconds()


def replica_lines(
    fetch: Callable[[str, str], AppView | None],
    kube: Callable[[], KubeApi],
    ns: str,
    name: str,
    role: str,
    k: int,
    since: datetime | None,
    until: datetime | None,
) -> Iterator[str]:
    """The log lines the replica's current pod has written, read once.

    Args:
        fetch: Reads the app (``(namespace, name)`` -> its view, or None when gone).
        kube: Returns the API.
        ns: The app's namespace.
        name: The app's Kubernetes name.
        role: The role's name.
        k: The replica index.
        since: Lines before this time are skipped (aware).
        until: Lines from this time on are skipped (aware).

    Yields:
        Lines, each ending with a newline.
    """
    rep = _replica(fetch(ns, name), role, k)
    if rep is not None and rep.pod is not None:
        yield from pod_lines(kube, ns, rep.pod, since, until, None)


def followed_lines(
    open_app: Callable[[], AppCache],
    kube: Callable[[], KubeApi],
    ns: str,
    role: str,
    k: int,
    since: datetime | None,
    until: datetime | None,
    read_once: Callable[[], Iterator[str]] | None = None,
) -> Iterator[str]:
    """The log lines of one replica until it ends: of its pod, then of its retries' pods.

    While the replica has no pod, or its pod has not started, this waits on the watch hub's
    cached view of the app (no request); each started pod's log is then read with one
    long-lived ``follow`` request, reopened only when it drops.

    Args:
        open_app: Follows the app in the watch hub (closed when the lines end).
        kube: Returns the API.
        ns: The app's namespace.
        role: The role's name.
        k: The replica index.
        since: Lines before this time are skipped (aware).
        until: Reading stops at this time (aware).
        read_once: Reads the replica's pod once from the apiserver: used when the cache says
            the replica ended before it showed any of its pods started (a pod that ran for
            a moment; the Job's end heard before its pod's), so that no log is lost.

    Yields:
        Lines, each ending with a newline.
    """
    done: set[str] = set()
    app = open_app()
    try:
        while True:
            mark = app.mark()
            rep = _replica(app.view(), role, k)
            if rep is None:
                return  # the app is gone
            pod = rep.pod
            if pod is not None and _uid(pod) not in done and _started(pod):
                ended = PodEnd(app, pod)
                yield from pod_lines(kube, ns, pod, since, until, ended)
                done.add(_uid(pod))
                continue  # a retried replica gets a new pod: follow it too
            left = _left(until)
            if is_terminal(rep.state) and not done and read_once is not None:
                yield from read_once()
                return
            if is_terminal(rep.state) or (left is not None and left <= 0):
                return
            app.wait(mark, WAIT_S if left is None else min(WAIT_S, left))
    finally:
        app.close()


class PodEnd:
    """Decides, from the watch hub's cache, whether a pod whose log stream ended will write
    more, waiting (with no request) until reading it again is worth it.

    Args:
        app: The pod's app in the watch hub.
        pod: The pod.
    """

    def __init__(self, app: AppCache, pod: dict[str, Any]) -> None:
        self._app = app
        self._name = str(pod["metadata"]["name"])
        self._uid = _uid(pod)
        self._container = str(pod["spec"]["containers"][0]["name"])
        self._backoff = Backoff(cap=SETTLE_S)

    def __call__(self, clean: bool, read_any: bool) -> bool:
        """Whether the pod will write no more; otherwise returns when to read it again.

        Args:
            clean: The stream ended without an error (its container may have exited).
            read_any: The stream delivered lines.

        Returns:
            True when the pod ended or is gone.
        """
        if read_any:
            self._backoff.reset()
        mark = self._app.mark()
        if self._over():
            return True
        # the container exited and the cache has not heard yet, or the stream dropped:
        # wait for the pod to change (or a pause), then read on from the last line
        self._app.wait(mark, SETTLE_S if clean else self._backoff.next())
        return self._over()

    def _over(self) -> bool:
        current = self._app.pod(self._name)
        if current is None or _uid(current) != self._uid:
            return True
        status = current.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            return True
        # its container exited (a sidecar may keep the pod running; restartPolicy is Never)
        return any(
            cs.get("name") == self._container and "terminated" in (cs.get("state") or {})
            for cs in status.get("containerStatuses") or []
        )


class _Cursor:
    """Where a pod's log was read up to: the last line's time and how many lines had it,
    so that a reopened stream (from that second on) repeats and loses nothing."""

    def __init__(self, since: datetime | None) -> None:
        self.since = since
        self.last: datetime | None = None
        self.at_last = 0
        self._skip = 0

    def reopen(self) -> dict[str, str]:
        """Starts a new read; returns its ``sinceTime`` query (empty: from the start)."""
        self._skip = self.at_last
        start = self.last or self.since
        if start is None:
            return {}
        whole = start.astimezone(timezone.utc).replace(microsecond=0)
        return {"sinceTime": whole.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def new(self, ts: datetime) -> bool:
        """Whether a line of time ``ts`` was not yielded before (and counts it)."""
        if self.since is not None and ts < self.since:
            return False
        if self.last is not None and ts < self.last:
            return False
        if ts == self.last and self._skip > 0:
            self._skip -= 1
            return False
        if ts == self.last:
            self.at_last += 1
        else:
            self.last, self.at_last = ts, 1
        return True


def pod_lines(
    kube: Callable[[], KubeApi],
    ns: str,
    pod: dict[str, Any],
    since: datetime | None,
    until: datetime | None,
    ended: Callable[[bool, bool], bool] | None,
) -> Iterator[str]:
    """Lines of one pod: what it wrote so far, or (``ended`` given) until it ends.

    Reads the pod's log through the apiserver with ``timestamps=true`` (to filter by time, and
    to reopen a dropped stream from the last line's second without repeating a line).

    Args:
        kube: Returns the API.
        ns: The pod's namespace.
        pod: The pod.
        since: Lines before this time are skipped.
        until: Reading stops at this time.
        ended: To follow the log: after each end of the stream, called with whether it
            ended cleanly and delivered lines; returns True when the pod writes no more
            (see :class:`PodEnd`).

    Yields:
        Lines, each ending with a newline.
    """
    api = kube()
    container = pod["spec"]["containers"][0]["name"]
    path = core_path(ns, "pods", pod["metadata"]["name"]) + "/log"
    cursor = _Cursor(since)
    while True:
        query: dict[str, Any] = {"container": container, "timestamps": "true", **cursor.reopen()}
        if ended is not None:
            query["follow"] = "true"
        clean, read_any = False, False
        try:
            for raw in api.stream_lines(path, query, LOG_READ_TIMEOUT_S if ended else 60.0):
                ts, text = split_timestamp(raw)
                if ts is not None:
                    if until is not None and ts >= until:
                        return
                    if not cursor.new(ts):
                        continue
                read_any = True
                yield text + "\n"
            clean = True
        except KubernetesApiError as e:
            if e.status not in (400, 404):  # 400: not started; 404: the pod is gone
                raise
            if ended is None:
                return
        except Exception as e:  # a dropped stream: reopened below
            if ended is None:
                raise
            log.debug("log stream of %s ended: %r", pod["metadata"]["name"], e)
        left = _left(until)
        if ended is None or (left is not None and left <= 0) or ended(clean, read_any):
            return


_TS_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?(.*)$")


def split_timestamp(raw: str) -> tuple[datetime | None, str]:
    """Splits a line read with ``timestamps=true`` into its time (None: none) and text."""
    m = _TS_LINE.match(raw)
    if not m:
        return None, raw.rstrip("\r")
    return parse_time(m.group(1)), m.group(2).rstrip("\r")
