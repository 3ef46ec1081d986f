"""Changing an app on the cluster: create its objects, restart and stop them, delete them.

What the scheduler writes to the apiserver: the objects of a submission (rolled back when
one is refused, :func:`create_app`), the restarts and stops that reconcile planned
(:func:`apply_actions`, planned by :mod:`tether.schedulers.kubernetes.reconcile`), stopping
one object while keeping its record (:func:`stop_object`; Volcano Jobs through a Volcano
``Command``), cancelling an app (:func:`cancel_app`) and removing every object of an app
(:func:`delete_app_objects`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from tether.schedulers.kubernetes.client import (
    KubeApi,
    KubernetesApiError,
    KubernetesQuotaError,
    core_path,
    path_for,
    quota_refusal,
)
from tether.schedulers.kubernetes.disruption import (
    DISRUPTED,
    disruption_failure,
    encode_failure,
)
from tether.schedulers.kubernetes.fetch import (
    appwrapper_path,
    commands_path,
    jobs_path,
    list_optional,
    pods_path,
    selector,
    volcano_path,
)
from tether.schedulers.kubernetes.naming import (
    ANN_FAILURE,
    ANN_POD,
    ANN_STOP_REASON,
    ANN_STOPPED,
    ANN_SUBMITTED,
    APPWRAPPER_GROUP,
    LABEL_APP_ID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    VOLCANO_BUS_GROUP,
    VOLCANO_BUS_VERSION,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
)
from tether.schedulers.kubernetes.reconcile import job_active
from tether.schedulers.kubernetes.render import KubernetesRequest
from tether.schedulers.kubernetes.status import pod_failure
from tether.schedulers.kubernetes.views import AppView
from tether.specs import AppState

log: logging.Logger = logging.getLogger(__name__)


# ---- create ----------------------------------------------------------------------------------
def create_app(api: KubeApi, req: KubernetesRequest) -> None:
    """Creates the request's objects in order, each marked with the submission time.

    When a create fails, the objects created so far are removed again.

    Args:
        api: The API.
        req: The rendered request.

    Raises:
        KubernetesApiError: When the apiserver refuses an object (the message names it and
            hints at the likely cause).
    """
    created: list[dict[str, Any]] = []
    submitted = f"{time.time():.6f}"
    for manifest in req.manifests:
        meta = dict(manifest.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), ANN_SUBMITTED: submitted}
        manifest = {**manifest, "metadata": meta}
        try:
            api.create(path_for(manifest, req.namespace), manifest)
        except KubernetesApiError as e:
            for done in reversed(created):
                try:
                    api.delete(path_for(done, req.namespace, with_name=True))
                except KubernetesApiError:
                    log.warning("could not roll back %s", done["metadata"]["name"])
            what = (
                f"cannot create {manifest['kind']} {manifest['metadata']['name']!r} in "
                f"namespace {req.namespace!r}: {e}"
            )
            quota = quota_refusal(e)
            if quota is not None:
                raise KubernetesQuotaError(
                    e.status,
                    f"{what} (the namespace's ResourceQuota {quota[0]!r} has no room for the "
                    "job: free some, raise the quota, or run it in another namespace or on "
                    "another scheduler)",
                    quota=quota[0],
                    detail=quota[1],
                ) from e
            raise KubernetesApiError(e.status, what + _create_hint(manifest, e)) from e
        created.append(manifest)


def _create_hint(manifest: Mapping[str, Any], err: KubernetesApiError) -> str:
    api_version = str(manifest.get("apiVersion", ""))
    if err.status == 404 and api_version.startswith(VOLCANO_GROUP):
        return " (is Volcano installed? the cluster has no batch.volcano.sh/v1alpha1 Job API)"
    if err.status == 404 and api_version.startswith(APPWRAPPER_GROUP):
        return " (is MCAD installed? the cluster has no mcad.ibm.com/v1beta1 AppWrapper API)"
    if err.status == 404:
        return " (does the namespace exist?)"
    if err.status == 403:
        return " (your Kubernetes user may not create this kind in that namespace)"
    return ""


# ---- restart and stop ------------------------------------------------------------------------
def apply_actions(api: KubeApi, view: AppView) -> None:
    """Performs the stops and restarts that :func:`~.status.analyze` planned (idempotent).

    Args:
        api: The API.
        view: The app, with ``creates`` and ``stops`` filled.
    """
    # New attempts first, then stops: if a call fails midway, the next describe finds the
    # old attempts still running next to newer ones and stops them (see analyze).
    for job in view.creates:
        try:
            api.create(jobs_path(view.namespace), job)
            log.info("restarted %s as Job %s", view.app_id, job["metadata"]["name"])
        except KubernetesApiError as e:
            if e.status != 409:  # 409: another process created this attempt already
                raise
    for obj, kind, reason in view.stops:
        stop_object(api, view, obj, kind, reason)
    for job, value in view.records:
        api.merge_patch(jobs_path(view.namespace, job["metadata"]["name"]),
                        {"metadata": {"annotations": {ANN_POD: value}}})  # fmt: skip
    for job, pod_name, node, pod in view.disruptions:
        failure = disruption_failure(
            pod_name, node, pod_failure(pod) if pod is not None else None, _node_exists(api, node)
        )
        log.info("%s: pod %s was deleted under Job %s (%s); stopping the Job", view.app_id,
                 pod_name, job["metadata"]["name"], failure.describe())  # fmt: skip
        stop_object(api, view, job, DISRUPTED, failure.reason,
                    extra={ANN_FAILURE: encode_failure(failure)})  # fmt: skip


def _node_exists(api: KubeApi, node: str) -> bool | None:
    """Whether the Node exists; None when it cannot be read (e.g. no RBAC on Nodes)."""
    try:
        return api.get(f"/api/v1/nodes/{quote(node, safe='')}") is not None
    except KubernetesApiError as e:
        log.debug("could not read node %s: %s", node, e)
        return None


def stop_object(
    api: KubeApi,
    view: AppView,
    obj: dict[str, Any],
    kind: str,
    why: str,
    extra: Mapping[str, str] | None = None,
) -> None:
    """Stops one object of the app, marking it ``tether.dev/stopped=<kind>`` with the reason.

    A ``batch/v1`` Job gets ``parallelism=0`` and ``activeDeadlineSeconds=1``, a Volcano Job
    an ``AbortJob`` command; an AppWrapper is only marked (its Jobs are stopped one by one).

    Args:
        api: The API.
        view: The app.
        obj: The object.
        kind: ``cancelled``, ``failed``, ``superseded`` or ``disrupted``.
        why: The reason (cut to 1000 characters).
        extra: Further annotations to set with the mark.
    """
    meta = obj["metadata"]
    ann = {ANN_STOPPED: kind, ANN_STOP_REASON: why[:1000], **(extra or {})}
    if obj.get("kind") == "Job" and obj.get("apiVersion") == "batch/v1":
        api.merge_patch(
            jobs_path(view.namespace, meta["name"]),
            {"metadata": {"annotations": ann},
             "spec": {"parallelism": 0, "activeDeadlineSeconds": 1}},
        )  # fmt: skip
    elif obj.get("kind") == "Job":  # Volcano
        api.merge_patch(volcano_path(view.namespace, meta["name"]),
                        {"metadata": {"annotations": ann}})  # fmt: skip
        _volcano_command(api, view.namespace, obj, "AbortJob")
    else:  # AppWrapper: mark it; its Jobs are stopped one by one
        api.merge_patch(appwrapper_path(view.namespace, meta["name"]),
                        {"metadata": {"annotations": ann}})  # fmt: skip


def _volcano_command(api: KubeApi, ns: str, vcjob: dict[str, Any], action: str) -> None:
    meta = vcjob["metadata"]
    owner = {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    command = {
        "apiVersion": f"{VOLCANO_BUS_GROUP}/{VOLCANO_BUS_VERSION}",
        "kind": "Command",
        "metadata": {
            "generateName": f"{meta['name'][:40]}-{action.lower()}-",
            "namespace": ns,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP_ID: meta["name"]},
            "ownerReferences": [owner],
        },
        "action": action,
        "target": owner,
    }
    try:
        api.create(commands_path(ns), command)
    except KubernetesApiError as e:
        log.warning("could not send Volcano command %s to %s: %s", action, meta["name"], e)


def cancel_app(api: KubeApi, view: AppView) -> None:
    """Stops every part of the app that may still run, marked ``cancelled`` (records stay).

    Args:
        api: The API.
        view: The app.
    """
    why = "cancelled by the user"
    if view.vcjob is not None:
        stop_object(api, view, view.vcjob, "cancelled", why)
    if view.appwrapper is not None:
        stop_object(api, view, view.appwrapper, "cancelled", why)
    for rep in view.replicas:  # the current attempt of every replica not done yet
        if rep.job is not None and rep.state != AppState.SUCCEEDED and not rep.stopped:
            stop_object(api, view, rep.job, "cancelled", why)
    for job in view.jobs:  # older attempts still running
        if job_active(job):
            stop_object(api, view, job, "cancelled", why)


# ---- delete ----------------------------------------------------------------------------------
def delete_app_objects(api: KubeApi, ns: str, name: str) -> None:
    """Removes every object labelled with the app (idempotent: missing ones are fine).

    Args:
        api: The API.
        ns: The app's namespace.
        name: The app's Kubernetes name.
    """
    sel = selector(name)
    for path in (volcano_path(ns, name), appwrapper_path(ns, name)):
        try:
            api.delete(path)
        except KubernetesApiError as e:
            if e.status not in (403, 405):
                raise
    for cmd in list_optional(api, commands_path(ns), sel):
        api.delete(commands_path(ns) + "/" + cmd["metadata"]["name"])
    for job in api.list(jobs_path(ns), sel):
        api.delete(jobs_path(ns, job["metadata"]["name"]))
    for svc in api.list(core_path(ns, "services"), sel):
        api.delete(core_path(ns, "services", svc["metadata"]["name"]))
    for pod in api.list(pods_path(ns), sel):
        api.delete(core_path(ns, "pods", pod["metadata"]["name"]))
