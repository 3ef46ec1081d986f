"""Roles read back from the pod templates tether rendered.

:func:`role_meta` reads a role's retry settings and replica count from the annotations of its
pod template; :func:`rebuild_role` rebuilds the :class:`~tether.specs.Role` (image, command,
env, resources, ports, mounts) that ``describe`` reports. Pure functions, no I/O.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.schedulers.kubernetes.fields import annotations_of, labels_of, to_int
from tether.schedulers.kubernetes.naming import (
    ANN_MAX_RETRIES,
    ANN_MIN_REPLICAS,
    ANN_NUM_REPLICAS,
    ANN_PORT_NAMES,
    ANN_RETRY_POLICY,
    ANN_ROLE_INDEX,
    ANN_ROLE_NAME,
    DEVICE_VOLUME_PREFIX,
    SHM_VOLUME,
)
from tether.schedulers.replica import REPLICA_ENV
from tether.specs import (
    NULL_RESOURCE,
    BindMount,
    DeviceMount,
    Mount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)


@dataclass
class RoleMeta:
    """A role as tether rendered it (from the pod template's annotations)."""

    name: str
    index: int
    num_replicas: int
    max_retries: int
    retry_policy: RetryPolicy
    min_replicas: int | None
    template: dict[str, Any]


def role_meta(template: Mapping[str, Any]) -> RoleMeta:
    """Reads a role's metadata from a pod template rendered by tether."""
    ann = annotations_of(template)
    try:
        policy = RetryPolicy(ann.get(ANN_RETRY_POLICY, "APPLICATION"))
    except ValueError:
        policy = RetryPolicy.APPLICATION
    min_rep = ann.get(ANN_MIN_REPLICAS)
    return RoleMeta(
        name=ann.get(ANN_ROLE_NAME) or str(labels_of(template).get("tether.dev/role", "?")),
        index=to_int(ann.get(ANN_ROLE_INDEX)),
        num_replicas=to_int(ann.get(ANN_NUM_REPLICAS), 1),
        max_retries=to_int(ann.get(ANN_MAX_RETRIES)),
        retry_policy=policy,
        min_replicas=to_int(min_rep) if min_rep is not None else None,
        template=dict(template),
    )


# ---- rebuilding a role ---------------------------------------------------------------------
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z]*)$")
_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def parse_quantity(text: str) -> float:
    """Parses a Kubernetes quantity (``500m``, ``2``, ``1536Mi``, ``1G``).

    Args:
        text: The quantity.

    Returns:
        Its value in base units.

    Raises:
        ValueError: For text that is not a quantity.
    """
    m = _QUANTITY.match(str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _resource(container: Mapping[str, Any], selector: Mapping[str, str]) -> Resource:
    res = container.get("resources") or {}
    limits = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    if not limits:
        base = copy.deepcopy(NULL_RESOURCE)
        base.capabilities = dict(selector)
        return base
    cpu = parse_quantity(limits["cpu"]) if "cpu" in limits else 0.0
    mem = int(parse_quantity(limits["memory"]) / 2**20) if "memory" in limits else 0
    gpu = 0
    devices: dict[str, int] = {}
    for key, val in limits.items():
        if key in ("cpu", "memory", "ephemeral-storage") or "/" not in key:
            continue
        if key.endswith("/gpu"):
            gpu += int(parse_quantity(val))
        else:
            devices[key] = int(parse_quantity(val))
    return Resource(
        cpu=round(cpu, 3), gpu=gpu, memMB=mem, capabilities=dict(selector), devices=devices
    )


def _mounts(spec: Mapping[str, Any], container: Mapping[str, Any]) -> list[Mount]:
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    out: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm.get("name")) or {}
        ro = bool(vm.get("readOnly", False))
        if vm.get("name") == SHM_VOLUME:
            continue
        if "persistentVolumeClaim" in vol:
            out.append(VolumeMount(vol["persistentVolumeClaim"]["claimName"], vm["mountPath"], ro))
        elif "hostPath" in vol and str(vm.get("name", "")).startswith(DEVICE_VOLUME_PREFIX):
            out.append(DeviceMount(vol["hostPath"]["path"], vm["mountPath"], "r" if ro else "rwm"))
        elif "hostPath" in vol:
            out.append(BindMount(vol["hostPath"]["path"], vm["mountPath"], ro))
    return out


def rebuild_role(meta: RoleMeta) -> Role:
    """Rebuilds a :class:`Role` from the pod template tether rendered (replica 0's values).

    Args:
        meta: The role's metadata and template.

    Returns:
        The role (macros appear substituted for replica 0; tether's own env vars dropped).
    """
    spec = meta.template.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    command = list(container.get("command") or []) + list(container.get("args") or [])
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env") or []
        if e.get("name") not in REPLICA_ENV and "valueFrom" not in e
    }
    renamed = dict(
        pair.split("=", 1)
        for pair in annotations_of(meta.template).get(ANN_PORT_NAMES, "").split(",")
        if "=" in pair
    )
    ports = {
        renamed.get(str(p.get("name")), str(p.get("name"))): int(p["containerPort"])
        for p in container.get("ports") or []
    }
    return Role(
        name=meta.name,
        image=str(container.get("image", "")),
        entrypoint=command[0] if command else "",
        args=command[1:],
        env=env,
        num_replicas=meta.num_replicas,
        min_replicas=meta.min_replicas,
        max_retries=meta.max_retries,
        retry_policy=meta.retry_policy,
        resource=_resource(container, spec.get("nodeSelector") or {}),
        port_map=ports,
        mounts=_mounts(spec, container),
    )
