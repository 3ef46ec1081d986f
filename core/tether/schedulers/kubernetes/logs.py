"""Reading a replica's log through the apiserver, following it across pod retries.

:func:`replica_log` is the scheduler's ``log_iter``: it checks the role and replica, then
reads the log of the replica's current pod (:func:`pod_lines`, with timestamps so that a
time window filters lines and a dropped follow stream resumes without repeating any) and, when
tailing, of the pods that replace it after a retry.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from tether.schedulers.api import filter_regex
from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError, core_path
from tether.schedulers.kubernetes.fields import parse_time
from tether.schedulers.kubernetes.views import AppView, Replica
from tether.specs.status import is_terminal

log: logging.Logger = logging.getLogger(__name__)

LOG_POLL_S = 1.0
LOG_READ_TIMEOUT_S = 120.0


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
    lines = replica_lines(
        fetch, kube, ns, name, role_name, k, _as_aware(since), _as_aware(until), should_tail
    )
    return filter_regex(regex, lines)


def _replica(view: AppView | None, role: str, k: int) -> Replica | None:
    if view is None:
        return None
    return next((r for r in view.replicas if r.role == role and r.replica_id == k), None)


def replica_lines(
    fetch: Callable[[str, str], AppView | None],
    kube: Callable[[], KubeApi],
    ns: str,
    name: str,
    role: str,
    k: int,
    since: datetime | None,
    until: datetime | None,
    should_tail: bool,
) -> Iterator[str]:
    """The log lines of one replica: of its current pod, then of the pods of its retries.

    Args:
        fetch: Reads the app (``(namespace, name)`` -> its view, or None when gone).
        kube: Returns the API.
        ns: The app's namespace.
        name: The app's Kubernetes name.
        role: The role's name.
        k: The replica index.
        since: Lines before this time are skipped (aware).
        until: Reading stops at this time (aware).
        should_tail: Whether to follow the replica until it ends.

    Yields:
        Lines, each ending with a newline.
    """
    done: set[str] = set()
    while True:
        rep = _replica(fetch(ns, name), role, k)
        if rep is None:
            return
        pod = rep.pod
        uid = str((pod or {}).get("metadata", {}).get("uid", ""))
        if pod is not None and uid not in done:
            finished = yield from pod_lines(kube, ns, pod, since, until, should_tail)
            if not should_tail:
                return
            if finished:
                done.add(uid)
            else:
                time.sleep(LOG_POLL_S)
            if until is not None and datetime.now(timezone.utc) >= until:
                return
            continue  # a retried replica gets a new pod: follow it too
        if not should_tail or is_terminal(rep.state):
            return
        if until is not None and datetime.now(timezone.utc) >= until:
            return
        time.sleep(LOG_POLL_S)


def pod_lines(
    kube: Callable[[], KubeApi],
    ns: str,
    pod: dict[str, Any],
    since: datetime | None,
    until: datetime | None,
    follow: bool,
) -> Generator[str, None, bool]:
    """Lines of one pod; returns True when its container will write no more.

    Reads the pod's log through the apiserver (``timestamps=true``, to filter by time and to
    resume a dropped follow stream without repeating lines).

    Args:
        kube: Returns the API.
        ns: The pod's namespace.
        pod: The pod.
        since: Lines before this time are skipped.
        until: Reading stops at this time.
        follow: Whether to follow the log until the container ends.

    Yields:
        Lines, each ending with a newline.

    Returns:
        True when the container will write no more.
    """
    api = kube()
    meta = pod["metadata"]
    container = pod["spec"]["containers"][0]["name"]
    path = core_path(ns, "pods", meta["name"]) + "/log"
    last_ts: datetime | None = None
    seen_at_last = 0
    while True:
        query: dict[str, Any] = {"container": container, "timestamps": "true"}
        start = last_ts or since
        if start is not None:
            ago = (datetime.now(timezone.utc) - start).total_seconds()
            query["sinceSeconds"] = max(1, math.ceil(ago) + 1)
        if follow:
            query["follow"] = "true"
        skip_at_last = seen_at_last
        try:
            for raw in api.stream_lines(path, query, LOG_READ_TIMEOUT_S if follow else 60.0):
                ts, text = split_timestamp(raw)
                if ts is not None:
                    if since is not None and ts < since:
                        continue
                    if until is not None and ts >= until:
                        return True
                    if last_ts is not None and ts < last_ts:
                        continue
                    if last_ts is not None and ts == last_ts and skip_at_last > 0:
                        skip_at_last -= 1
                        continue
                    if ts == last_ts:
                        seen_at_last += 1
                    else:
                        last_ts, seen_at_last = ts, 1
                yield text + "\n"
        except KubernetesApiError as e:
            if e.status not in (400, 404) or not follow:
                if e.status in (400, 404):
                    return e.status == 404  # not started yet / pod gone
                raise
        except Exception as e:  # a dropped stream: reconnect below
            log.debug("log stream of %s ended: %r", meta["name"], e)
        if not follow:
            return True
        current = kube().get(core_path(ns, "pods", meta["name"]))
        if current is None or current.get("metadata", {}).get("uid") != meta.get("uid"):
            return True
        phase = (current.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return True
        if until is not None and datetime.now(timezone.utc) >= until:
            return True
        time.sleep(LOG_POLL_S)


_TS_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?(.*)$")


def split_timestamp(raw: str) -> tuple[datetime | None, str]:
    """Splits a line read with ``timestamps=true`` into its time (None: none) and text."""
    m = _TS_LINE.match(raw)
    if not m:
        return None, raw.rstrip("\r")
    return parse_time(m.group(1)), m.group(2).rstrip("\r")
