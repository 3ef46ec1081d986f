"""Kubernetes manifests from an :class:`~tether.specs.AppDef`: pure functions, golden-tested.

:func:`render` turns an app plus :class:`~tether.schedulers.kubernetes.options.KubernetesOpts`
into a :class:`KubernetesRequest` (a list of manifest dicts); nothing here talks to a cluster or
imports the ``kubernetes`` package, so ``--dryrun`` works offline. The package docs
(:mod:`tether.schedulers.kubernetes`) explain the design; this module is the entry point of
rendering and holds the shapes of the top-level objects:

* ``gang=none``/``kueue``: one ``batch/v1`` Job per replica, plus a headless Service when the
  app has more than one replica;
* ``gang=volcano``: one ``batch.volcano.sh/v1alpha1`` Job with one task per replica;
* ``gang=appwrapper``: one ``mcad.ibm.com/v1beta1`` AppWrapper wrapping the Jobs and Service.

The parts live in modules of their own: the checks of the options and the app
(:mod:`~tether.schedulers.kubernetes.checks`), names, labels and annotations
(:mod:`~tether.schedulers.kubernetes.naming`), and each replica's pod template
(:mod:`~tether.schedulers.kubernetes.podspec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from tether.schedulers.api import JOB_KEY
from tether.schedulers.kubernetes.checks import check_app, check_opts
from tether.schedulers.kubernetes.naming import (
    APPWRAPPER_GROUP,
    APPWRAPPER_VERSION,
    JOB_API_VERSION,
    KUEUE_QUEUE_LABEL,
    LABEL_APP_ID,
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_REPLICA_ID,
    LABEL_ROLE,
    MANAGED_BY,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    app_annotations,
    app_labels,
    job_name,
    port_name,
    replica_hostname,
    role_slug,
    volcano_task_name,
)
from tether.schedulers.kubernetes.options import (
    GANG_APPWRAPPER,
    GANG_KUEUE,
    GANG_VOLCANO,
    KubernetesOpts,
)
from tether.schedulers.kubernetes.podspec import render_pod_template
from tether.specs import AppDef, RetryPolicy, Role
from tether.specs.secrets import MASK, is_secret_name


# ---- objects -------------------------------------------------------------------------------
@dataclass
class KubernetesRequest:
    """The native request of the kubernetes scheduler: the manifests to create, in order.

    Attributes:
        namespace: Where everything is created.
        name: The app's Kubernetes name (unique per submission).
        gang: The gang option the manifests were rendered for.
        manifests: Object dicts (camelCase, as ``kubectl apply`` takes them).
        job_key: The caller's job identity, if any.
        context: The kubeconfig context to submit to (None: the scheduler's).
    """

    namespace: str
    name: str
    gang: str
    manifests: list[dict[str, Any]]
    job_key: str | None = None
    context: str | None = None

    @property
    def app_id(self) -> str:
        """``{namespace}:{name}``."""
        return f"{self.namespace}:{self.name}"


def _mask(obj: Any) -> Any:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k == "env" and isinstance(v, list):
                out[k] = [
                    {**e, "value": MASK}
                    if isinstance(e, dict) and is_secret_name(str(e.get("name", ""))) and
                    e.get("value")
                    else e
                    for e in v
                ]
            else:
                out[k] = _mask(v)
        return out
    if isinstance(obj, list):
        return [_mask(v) for v in obj]
    return obj


def format_request(req: KubernetesRequest) -> str:
    """The request as multi-document YAML, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The YAML text.
    """
    return yaml.safe_dump_all(
        [_mask(m) for m in req.manifests],
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )


def render_service(
    app: AppDef, name: str, opts: KubernetesOpts, job_key: str | None
) -> dict[str, Any]:
    """The headless Service that gives every replica a DNS name ``<hostname>.<name>``."""
    ports: list[dict[str, Any]] = []
    seen: set[int] = set()
    taken: set[str] = set()
    for role in app.roles:
        for pname, port in role.port_map.items():
            if port in seen:
                continue
            seen.add(port)
            ports.append(
                {"name": port_name(pname, port, taken), "port": port, "targetPort": port,
                 "protocol": "TCP"}
            )
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP_ID: name},
    }
    if ports:
        spec["ports"] = ports
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


DISRUPTION_FAILS_JOB: dict[str, Any] = {
    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}
"""The Job's ``podFailurePolicy`` for an app with a recovery policy (see :func:`render_job`)."""

DISRUPTION_NOT_COUNTED: dict[str, Any] = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}
"""The ``podFailurePolicy`` of a Job that retries its pod itself (``REPLICA``) in an app
without a recovery policy: a disrupted pod is replaced without using up a retry."""


def render_job(
    app: AppDef,
    role: Role,
    replica_id: int,
    name: str,
    opts: KubernetesOpts,
    template: dict[str, Any],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``batch/v1`` Job running one replica (attempt 0).

    ``backoffLimit`` is ``max_retries`` for the ``REPLICA`` retry policy (Kubernetes retries
    the pod) and 0 otherwise (tether restarts the role or the app, see the scheduler). An app
    with a recovery policy gets a ``podFailurePolicy`` (Kubernetes 1.26+; older apiservers
    drop the field): a pod with the ``DisruptionTarget`` condition (preempted, evicted, its
    node drained or lost) fails the Job at once, so the Job's own retries never restart a
    disrupted pod and the pod keeps the cause tether's recovery reads. Without a recovery
    policy, a Job that retries its pod itself (``backoffLimit`` > 0) gets ``Ignore`` on
    ``DisruptionTarget`` instead: a preempted or evicted pod is replaced without counting
    against ``max_retries``, which are for the program's own failures (as the Kubernetes
    documentation suggests for disruptions); a Job tether restarts itself (``backoffLimit``
    0) gets none, so a disrupted pod fails it with its cause and tether's retries apply.
    """
    labels = app_labels(name, job_key, opts)
    labels[LABEL_ROLE] = role_slug(role.name)
    labels[LABEL_REPLICA_ID] = str(replica_id)
    labels[LABEL_ATTEMPT] = "0"
    if opts.gang == GANG_KUEUE and opts.queue:
        labels[KUEUE_QUEUE_LABEL] = opts.queue
    backoff = role.max_retries if role.retry_policy == RetryPolicy.REPLICA else 0
    spec: dict[str, Any] = {
        "backoffLimit": backoff,
        "completions": 1,
        "parallelism": 1,
    }
    if opts.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = opts.ttl_seconds_after_finished
    if app.recovery is not None:
        spec["podFailurePolicy"] = DISRUPTION_FAILS_JOB
    elif backoff > 0:
        spec["podFailurePolicy"] = DISRUPTION_NOT_COUNTED
    if opts.gang == GANG_KUEUE:
        spec["suspend"] = True
    spec["template"] = template
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": job_name(name, role.name, replica_id),
            "namespace": opts.namespace,
            "labels": labels,
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def _min_available(app: AppDef) -> int:
    return sum(r.num_replicas if r.min_replicas is None else r.min_replicas for r in app.roles)


def _volcano_policies(role: Role) -> list[dict[str, str]]:
    if role.max_retries <= 0:
        return [{"event": "PodFailed", "action": "TerminateJob"}]
    if role.retry_policy == RetryPolicy.REPLICA:
        return [{"event": "PodFailed", "action": "RestartTask"}]
    # APPLICATION, and ROLE (Volcano cannot restart a subset of tasks: the whole job it is)
    return [
        {"event": "PodFailed", "action": "RestartJob"},
        {"event": "PodEvicted", "action": "RestartJob"},
    ]


def render_volcano_job(
    app: AppDef,
    name: str,
    opts: KubernetesOpts,
    templates: list[tuple[Role, int, dict[str, Any]]],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``batch.volcano.sh/v1alpha1`` Job: one task per replica, gang of ``minAvailable``."""
    tasks = []
    for role, k, template in templates:
        task: dict[str, Any] = {
            "name": volcano_task_name(role.name, k),
            "replicas": 1,
            "template": template,
            "policies": _volcano_policies(role),
        }
        if role.max_retries > 0:
            task["maxRetry"] = role.max_retries
        tasks.append(task)
    spec: dict[str, Any] = {
        "schedulerName": opts.scheduler_name or "volcano",
        "queue": opts.queue or "default",
        "minAvailable": _min_available(app),
        "maxRetry": max([r.max_retries for r in app.roles] + [0]),
    }
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    spec["tasks"] = tasks
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def render_appwrapper(
    app: AppDef,
    name: str,
    opts: KubernetesOpts,
    items: list[dict[str, Any]],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``mcad.ibm.com/v1beta1`` AppWrapper holding the Service and the Jobs.

    MCAD dispatches the wrapped objects only when the whole app fits (``minAvailable`` pods);
    ``APPLICATION``/``ROLE`` retries become AppWrapper requeuing.
    """
    generic: list[dict[str, Any]] = []
    for obj in items:
        item: dict[str, Any] = {"replicas": 1, "generictemplate": obj}
        if obj["kind"] == "Job":
            res = obj["spec"]["template"]["spec"]["containers"][0].get("resources", {})
            item["custompodresources"] = [
                {
                    "replicas": 1,
                    "requests": dict(res.get("requests", {})),
                    "limits": dict(res.get("limits", {})),
                }
            ]
        generic.append(item)
    spec: dict[str, Any] = {
        "schedulingSpec": {"minAvailable": _min_available(app)},
        "resources": {"GenericItems": generic},
    }
    requeues = max(
        [r.max_retries for r in app.roles if r.retry_policy != RetryPolicy.REPLICA] + [0]
    )
    if requeues > 0:
        spec["schedulingSpec"]["requeuing"] = {
            "timeInSeconds": 60,
            "maxTimeInSeconds": 0,
            "growthType": "exponential",
            "maxNumRequeuings": requeues,
        }
    return {
        "apiVersion": f"{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}",
        "kind": "AppWrapper",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def rank0_address(app: AppDef, name: str, opts: KubernetesOpts, with_service: bool) -> str:
    """Where replica 0 of the first role is reachable from every replica.

    Returns:
        Its DNS name under the headless Service, or ``localhost`` for a one-replica app.
    """
    if not with_service:
        return "localhost"
    host = replica_hostname(name, app.roles[0].name, 0)
    return f"{host}.{name}.{opts.namespace}.svc.{opts.cluster_domain}"


def render(app: AppDef, opts: KubernetesOpts, name: str) -> KubernetesRequest:
    """Renders an app into the manifests of one submission.

    Args:
        app: The (validated) app; ``app.metadata["tether.job_key"]`` is the job identity.
        opts: The run options.
        name: The app's Kubernetes name (see :data:`.naming.APP_NAME_RULE`).

    Returns:
        The request: Service first (when there is one), then the Jobs, the Volcano Job or
        the AppWrapper.

    Raises:
        ValueError: For options or an app the scheduler cannot run.
    """
    check_opts(opts)
    check_app(app)
    job_key = app.metadata.get(JOB_KEY) or None
    with_service = sum(r.num_replicas for r in app.roles) > 1
    rank0 = rank0_address(app, name, opts, with_service)
    subdomain = name if with_service else None
    templates: list[tuple[Role, int, dict[str, Any]]] = []
    for role_idx, role in enumerate(app.roles):
        for k in range(role.num_replicas):
            tpl = render_pod_template(
                app, role, role_idx, k, name, opts,
                rank0_host=rank0, subdomain=subdomain, job_key=job_key,
            )  # fmt: skip
            templates.append((role, k, tpl))
    manifests: list[dict[str, Any]] = []
    if with_service:
        manifests.append(render_service(app, name, opts, job_key))
    if opts.gang == GANG_VOLCANO:
        manifests.append(render_volcano_job(app, name, opts, templates, job_key))
    else:
        jobs = [render_job(app, r, k, name, opts, t, job_key) for r, k, t in templates]
        if opts.gang == GANG_APPWRAPPER:
            manifests = [render_appwrapper(app, name, opts, manifests + jobs, job_key)]
        else:
            manifests.extend(jobs)
    return KubernetesRequest(opts.namespace, name, opts.gang, manifests, job_key, opts.context)
