"""The pod template of one replica: container, resources, volumes, env and identity.

:func:`render_pod_template` is the part of rendering every gang option shares (the Jobs, the
Volcano tasks and the AppWrapper's Jobs all run it): macros substituted for the replica, the
image, the resources, the mounts, the env (secrets as ``secretKeyRef``), the replica's
hostname and labels, then the user's ``V1Pod`` overlay. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.schedulers.kubernetes.checks import ENV_FROM_KINDS, parse_env_from, parse_toleration
from tether.schedulers.kubernetes.naming import (
    ANN_MAX_RETRIES,
    ANN_MIN_REPLICAS,
    ANN_NUM_REPLICAS,
    ANN_PORT_NAMES,
    ANN_RETRY_POLICY,
    ANN_ROLE_INDEX,
    ANN_ROLE_NAME,
    DEVICE_VOLUME_PREFIX,
    LABEL_REPLICA_ID,
    LABEL_ROLE,
    MOUNT_VOLUME_PREFIX,
    SHM_VOLUME,
    app_labels,
    port_name,
    replica_hostname,
    role_slug,
)
from tether.schedulers.kubernetes.options import GANG_VOLCANO, KubernetesOpts
from tether.schedulers.replica import materialize
from tether.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    Role,
    VolumeMount,
)
from tether.specs.overlays import apply_overlay, get_overlay

OVERLAY_NAMESPACE = "kubernetes"
OVERLAY_KIND = "V1Pod"
"""Overlays stored with ``set_overlay(role, "kubernetes", "V1Pod", ...)`` merge into each
replica's pod template (``metadata``/``spec``; the role's container is named after the role)."""


# ---- resources -----------------------------------------------------------------------------
def _reserve(amount: int, reserve: int) -> int:
    """``amount - reserve``, but never less than half of ``amount`` (and never below 1)."""
    return max(amount - reserve, (amount + 1) // 2, 1)


def container_resources(res: Resource, opts: KubernetesOpts) -> dict[str, dict[str, str]]:
    """Requests and limits of one container.

    Limits are the resource as asked. CPU and memory requests subtract the reserve for
    system daemons (``reserved_millicpu``/``reserved_memory_mb``) so that a named resource
    sized as a whole instance still fits on that instance; the reserve is capped at half
    the amount, so a request is never zero or negative. ``-1`` (the default resource) and
    ``0`` ask for nothing. GPUs and ``devices`` are extended resources (request = limit).

    Args:
        res: The role's resource.
        opts: The run options.

    Returns:
        ``{"requests": {...}, "limits": {...}}`` (empty dicts dropped).
    """
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpu > 0:
        milli = max(1, round(res.cpu * 1000))
        limits["cpu"] = f"{milli}m"
        requests["cpu"] = f"{_reserve(milli, opts.reserved_millicpu)}m"
    if res.memMB > 0:
        mem = max(1, int(res.memMB))
        limits["memory"] = f"{mem}Mi"
        requests["memory"] = f"{_reserve(mem, opts.reserved_memory_mb)}Mi"
    extended: dict[str, int] = {}
    if res.gpu > 0:
        extended[opts.gpu_resource] = res.gpu
    for dev, count in res.devices.items():
        if count > 0:
            extended[dev] = extended.get(dev, 0) + count
    for name, count in extended.items():
        requests[name] = limits[name] = str(count)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def resolve_image(image: str, image_repo: str | None) -> str:
    """Prefixes ``image_repo`` to an image that names no registry.

    Args:
        image: E.g. ``trainer:1`` or ``ghcr.io/org/trainer:1``.
        image_repo: E.g. ``registry.example.com/team``; None keeps images as they are.

    Returns:
        The image to run.
    """
    if not image_repo:
        return image
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"{image_repo.rstrip('/')}/{image}"


# ---- the pod template ----------------------------------------------------------------------
def _role_annotations(role: Role, role_idx: int, port_names: dict[str, str]) -> dict[str, str]:
    ann = {
        ANN_ROLE_NAME: role.name,
        ANN_ROLE_INDEX: str(role_idx),
        ANN_NUM_REPLICAS: str(role.num_replicas),
        ANN_MAX_RETRIES: str(role.max_retries),
        ANN_RETRY_POLICY: role.retry_policy.value,
    }
    if role.min_replicas is not None:
        ann[ANN_MIN_REPLICAS] = str(role.min_replicas)
    renamed = {k: v for k, v in port_names.items() if k != v}
    if renamed:
        ann[ANN_PORT_NAMES] = ",".join(f"{v}={k}" for k, v in renamed.items())
    return ann


def _volumes(role: Role) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    privileged = False
    if not any(getattr(m, "dst_path", None) == "/dev/shm" for m in role.mounts):
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    for i, m in enumerate(role.mounts):
        if isinstance(m, BindMount):
            vol = f"{MOUNT_VOLUME_PREFIX}{i}"
            volumes.append({"name": vol, "hostPath": {"path": m.src_path}})
            mounts.append({"name": vol, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, VolumeMount):
            vol = f"{MOUNT_VOLUME_PREFIX}{i}"
            volumes.append(
                {
                    "name": vol,
                    "persistentVolumeClaim": {"claimName": m.src, "readOnly": m.read_only},
                }
            )
            mounts.append({"name": vol, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, DeviceMount):
            vol = f"{DEVICE_VOLUME_PREFIX}{i}"
            volumes.append({"name": vol, "hostPath": {"path": m.src_path}})
            mounts.append(
                {"name": vol, "mountPath": m.dst_path, "readOnly": "w" not in m.permissions}
            )
            privileged = True
    return volumes, mounts, privileged


def secret_env(role: Role) -> list[dict[str, Any]]:
    """The role's :attr:`~tether.specs.Role.secrets` as env ``valueFrom.secretKeyRef`` entries.

    The values stay in the cluster's Secrets: the manifest names only the Secret and key.

    Args:
        role: The role.

    Returns:
        One env entry per secret variable.
    """
    return [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        for var, ref in role.secrets.items()
    ]


def render_env_from(entries: Iterable[str] | None) -> list[dict[str, Any]]:
    """The container's ``envFrom``: every key of the named Secrets and ConfigMaps as env.

    Args:
        entries: ``secret:NAME`` / ``configmap:NAME`` entries.

    Returns:
        The ``envFrom`` list.
    """
    out: list[dict[str, Any]] = []
    for entry in entries or []:
        kind, name = parse_env_from(entry)
        out.append({ENV_FROM_KINDS[kind]: {"name": name}})
    return out


def render_pod_template(
    app: AppDef,
    role: Role,
    role_idx: int,
    replica_id: int,
    name: str,
    opts: KubernetesOpts,
    *,
    rank0_host: str,
    subdomain: str | None,
    job_key: str | None,
) -> dict[str, Any]:
    """The pod template of one replica (macros substituted, identity set).

    Args:
        app: The app.
        role: The role (unsubstituted).
        role_idx: Its index in ``app.roles``.
        replica_id: The replica index.
        name: The Kubernetes app name.
        opts: The run options.
        rank0_host: Address of replica 0 of the first role (``$TETHER_RANK0_HOST``).
        subdomain: The headless Service's name, when there is one.
        job_key: The caller's job identity, if any.

    Returns:
        ``{"metadata": ..., "spec": ...}``.
    """
    rep = materialize(
        role, app_id=f"{opts.namespace}:{name}", replica_id=replica_id, rank0_host=rank0_host
    )
    env = rep.env
    taken: set[str] = set()
    port_names = {p: port_name(p, port, taken) for p, port in rep.port_map.items()}
    volumes, volume_mounts, privileged = _volumes(rep)
    container: dict[str, Any] = {
        "name": role_slug(role.name),
        "image": resolve_image(rep.image, opts.image_repo),
        "command": [rep.entrypoint, *rep.args],
        "env": [{"name": k, "value": v} for k, v in env.items() if k not in role.secrets]
        + secret_env(role),
    }
    env_from = render_env_from(opts.env_from)
    if env_from:
        container["envFrom"] = env_from
    if opts.image_pull_policy:
        container["imagePullPolicy"] = opts.image_pull_policy
    resources = container_resources(rep.resource, opts)
    if resources:
        container["resources"] = resources
    if rep.port_map:
        container["ports"] = [
            {"name": port_names[p], "containerPort": port, "protocol": "TCP"}
            for p, port in rep.port_map.items()
        ]
    container["volumeMounts"] = volume_mounts
    if privileged:
        container["securityContext"] = {"privileged": True}

    labels = app_labels(name, job_key, opts)
    labels[LABEL_ROLE] = role_slug(role.name)
    labels[LABEL_REPLICA_ID] = str(replica_id)
    annotations = dict(opts.annotations or {})
    annotations.update(_role_annotations(role, role_idx, port_names))

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": replica_hostname(name, role.name, replica_id),
    }
    if subdomain:
        spec["subdomain"] = subdomain
    spec["enableServiceLinks"] = False
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    scheduler_name = opts.scheduler_name or ("volcano" if opts.gang == GANG_VOLCANO else None)
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
    selector = {str(k): str(v) for k, v in rep.resource.capabilities.items()}
    selector.update(opts.node_selector or {})
    if selector:
        spec["nodeSelector"] = selector
    if opts.tolerations:
        spec["tolerations"] = [parse_toleration(t) for t in opts.tolerations]
    spec["containers"] = [container]
    spec["volumes"] = volumes
    pod: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}
    # Overlays last: the platform team's escape hatch wins over everything tether rendered.
    apply_overlay(pod, get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND))
    return pod
