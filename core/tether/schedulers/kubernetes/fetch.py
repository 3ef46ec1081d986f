"""Reading tether's apps from the apiserver: where their objects live, and what they say.

The label selectors and API paths of the kinds tether creates, one app's objects analyzed
into an :class:`~tether.schedulers.kubernetes.views.AppView` (:func:`fetch_app`), every app
of some namespaces (:func:`app_views`, for ``list`` and ``find_jobs``), and a watch that
returns at the next change of an app's pods (:func:`wait_for_pod_change`). The analysis is
:mod:`tether.schedulers.kubernetes.status`'s; this module only reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError, core_path, group_path
from tether.schedulers.kubernetes.naming import (
    ANN_GANG,
    APPWRAPPER_GROUP,
    APPWRAPPER_PLURAL,
    APPWRAPPER_VERSION,
    LABEL_APP_ID,
    LABEL_JOB_KEY,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    VOLCANO_BUS_GROUP,
    VOLCANO_BUS_VERSION,
    VOLCANO_GROUP,
    VOLCANO_PLURAL,
    VOLCANO_VERSION,
    label_value,
)
from tether.schedulers.kubernetes.options import GANG_APPWRAPPER
from tether.schedulers.kubernetes.status import analyze
from tether.schedulers.kubernetes.views import AppView

log: logging.Logger = logging.getLogger(__name__)


# ---- selectors and paths ---------------------------------------------------------------------
def selector(name: str | None = None, job_key: str | None = None) -> str:
    """The label selector of tether's objects: of one app (``name``), of one job key, or all."""
    parts = [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]
    if name:
        parts.append(f"{LABEL_APP_ID}={name}")
    if job_key:
        parts.append(f"{LABEL_JOB_KEY}={label_value(job_key)}")
    return ",".join(parts)


def jobs_path(ns: str | None, name: str | None = None) -> str:
    """The path of ``batch/v1`` Jobs (of every namespace when ``ns`` is None), or of one."""
    return group_path("batch", "v1", "jobs", ns, name)


def volcano_path(ns: str | None, name: str | None = None) -> str:
    """The path of Volcano Jobs, or of one."""
    return group_path(VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL, ns, name)


def appwrapper_path(ns: str | None, name: str | None = None) -> str:
    """The path of AppWrappers, or of one."""
    return group_path(APPWRAPPER_GROUP, APPWRAPPER_VERSION, APPWRAPPER_PLURAL, ns, name)


def commands_path(ns: str) -> str:
    """The path of the Volcano Commands of a namespace."""
    return group_path(VOLCANO_BUS_GROUP, VOLCANO_BUS_VERSION, "commands", ns)


def pods_path(ns: str | None) -> str:
    """The path of the pods of a namespace (of every namespace when ``ns`` is None)."""
    return core_path(ns, "pods") if ns is not None else "/api/v1/pods"


# ---- reading ---------------------------------------------------------------------------------
def get_optional(api: KubeApi, path: str) -> dict[str, Any] | None:
    """The object at ``path``; None when the cluster does not serve or allow its kind.

    Args:
        api: The API.
        path: The object's path (a custom resource's, e.g. Volcano's).

    Returns:
        The object, or None for a missing one or a 403/405 answer.

    Raises:
        KubernetesApiError: For other errors.
    """
    try:
        return api.get(path)
    except KubernetesApiError as e:
        if e.status in (403, 405):
            return None
        raise


def list_optional(api: KubeApi, path: str, selector: str) -> list[dict[str, Any]]:
    """The objects at ``path`` matching ``selector``; none when the kind is not served/allowed.

    Args:
        api: The API.
        path: The collection's path.
        selector: A label selector.

    Returns:
        The objects (empty for a 403/405 answer).

    Raises:
        KubernetesApiError: For other errors.
    """
    try:
        return api.list(path, selector)
    except KubernetesApiError as e:
        if e.status in (403, 405):
            return []
        raise


def fetch_app(api: KubeApi, ns: str, name: str) -> AppView | None:
    """Reads one app's objects and analyzes them.

    Args:
        api: The API.
        ns: The app's namespace.
        name: The app's Kubernetes name.

    Returns:
        The view, or None when no object of the app exists.
    """
    sel = selector(name)
    jobs = api.list(jobs_path(ns), sel)
    gang = jobs[0]["metadata"].get("annotations", {}).get(ANN_GANG) if jobs else None
    vcjob = aw = None
    if not jobs or gang == GANG_APPWRAPPER:
        if gang is None:
            vcjob = get_optional(api, volcano_path(ns, name))
        if vcjob is None:
            aw = get_optional(api, appwrapper_path(ns, name))
    if not jobs and vcjob is None and aw is None:
        return None
    pods = api.list(pods_path(ns), sel)
    return analyze(ns, name, jobs, pods, vcjob, aw, datetime.now(timezone.utc))


def _group(
    objs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]],
    kind: str,
    items: list[dict[str, Any]],
) -> None:
    """Sorts objects by ``(namespace, app name)``, from their tether labels."""
    for obj in items:
        meta = obj.get("metadata") or {}
        app = (meta.get("labels") or {}).get(LABEL_APP_ID)
        if app:
            key = (str(meta.get("namespace") or ""), str(app))
            objs.setdefault(key, {}).setdefault(kind, []).append(obj)


def app_views(api: KubeApi, namespaces: Sequence[str | None], selector: str) -> list[AppView]:
    """Every app with objects matching ``selector`` in ``namespaces``, analyzed.

    Args:
        api: The API.
        namespaces: Where to look (None: every namespace).
        selector: A label selector (see :func:`selector`).

    Returns:
        One view per app.
    """
    views: list[AppView] = []
    for ns in namespaces:
        objs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
        _group(objs, "jobs", api.list(jobs_path(ns), selector))
        _group(objs, "vcjobs", list_optional(api, volcano_path(ns), selector))
        _group(objs, "aws", list_optional(api, appwrapper_path(ns), selector))
        if not objs:
            continue
        _group(objs, "pods", api.list(pods_path(ns), selector))
        now = datetime.now(timezone.utc)
        for (app_ns, app_name), kinds in objs.items():
            if not (kinds.get("jobs") or kinds.get("vcjobs") or kinds.get("aws")):
                continue
            vcjob = next(iter(kinds.get("vcjobs", [])), None)
            aw = next(iter(kinds.get("aws", [])), None)
            views.append(
                analyze(app_ns, app_name, kinds.get("jobs", []), kinds.get("pods", []),
                        vcjob, aw, now)
            )  # fmt: skip
    return views


# ---- watching --------------------------------------------------------------------------------
def wait_for_pod_change(
    kube: Callable[[], KubeApi], app_id: str, ns: str, name: str, timeout: float
) -> None:
    """Returns at the next change of one of the app's pods, or after ``timeout`` seconds.

    A watch of the app's pods; when it cannot be opened, a sleep.

    Args:
        kube: Returns the API (called inside the guarded block: an API that cannot be made
            is a failed watch too).
        app_id: The app (for messages).
        ns: Its namespace.
        name: Its Kubernetes name.
        timeout: The longest wait, in seconds.
    """
    deadline = time.monotonic() + max(timeout, 0.0)
    if timeout >= 1.0:
        sel = selector(name)
        try:
            api = kube()
            first = api.request("GET", pods_path(ns), query={"labelSelector": sel,
                                                             "limit": 1}) or {}
            rv = (first.get("metadata") or {}).get("resourceVersion")
            query = {"watch": "true", "labelSelector": sel, "resourceVersion": rv,
                     "timeoutSeconds": max(1, int(timeout))}
            for line in api.stream_lines(pods_path(ns), query, timeout + 5.0):
                if line.strip():
                    return
        except Exception as e:
            log.debug("watching %s failed (%r); sleeping instead", app_id, e)
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)
