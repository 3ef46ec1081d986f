"""Pure rendering of ``local_docker``: an AppDef and options -> Docker Engine API requests.

The request is what ``POST /containers/create`` takes, one body per replica, plus the app's
network. Addresses are the one thing not known here: :meth:`DockerRequest.with_addresses`
fills each container's IP on the app network and the ``/etc/hosts`` entries of every replica
once the engine has created the network (see the package docs for why).

Overlays (:mod:`tether.specs.overlays`) stored with
``set_overlay(role, "local_docker", "ContainerCreate", {...})`` merge into each of the role's
container create bodies last, after everything tether rendered (Engine API field names, e.g.
``{"HostConfig": {"ShmSize": 2**30, "CapAdd": ["SYS_PTRACE"]}}``). The overlay wins, also over
tether's labels: changing the ``tether.dev/`` labels hides the container from tether.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from tether.schedulers.ids import AppIdRule
from tether.schedulers.local_docker.options import LocalDockerOpts
from tether.schedulers.replica import materialize
from tether.specs import AppDef, BindMount, DeviceMount, Role, VolumeMount, mask_env
from tether.specs.overlays import apply_overlay, get_overlay
from tether.workspace.image import METADATA_KEY, ImagePlan

BACKEND = "local_docker"
LABEL_PREFIX = "tether.dev/"
LABEL_MANAGED_BY = LABEL_PREFIX + "managed-by"
MANAGED_BY = "tether"
LABEL_APP_ID = LABEL_PREFIX + "app-id"
LABEL_APP_NAME = LABEL_PREFIX + "app-name"
LABEL_ROLE = LABEL_PREFIX + "role"
LABEL_REPLICA_ID = LABEL_PREFIX + "replica-id"
LABEL_MAX_RETRIES = LABEL_PREFIX + "max-retries"
LABEL_JOB_KEY = LABEL_PREFIX + "job-key"
LABEL_CREATED = LABEL_PREFIX + "created"
LABEL_ROLE_SPEC = LABEL_PREFIX + "role-spec"
LABEL_STOP_TIMEOUT = LABEL_PREFIX + "stop-timeout"
APP_BASE_MAX = 30
HOSTNAME_MAX = 63
OVERLAY_NAMESPACE = BACKEND
OVERLAY_KIND = "ContainerCreate"
"""``set_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND, ...)`` merges into the create body."""
FIRST_HOST_OFFSET = 10
"""Replica ``i`` of the app gets the ``FIRST_HOST_OFFSET + i``-th address of the network."""


def _slug(text: str, limit: int) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-{2,}", "-", s)
    if len(s) > limit:
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        s = s[: limit - 7].rstrip("-") + "-" + digest
    return s or "x"


APP_ID_RULE = AppIdRule(max_base=APP_BASE_MAX, suffix_len=6, allowed="a-z0-9-", squeeze=True,
                        hash_cut=True, letter_prefix="t-", empty="x")
"""A submission's id is a hostname label (it also names the app's network)."""


def replica_hostname(app_id: str, role_name: str, replica_id: int) -> str:
    """The stable hostname (and container name) of a replica: ``<app_id>-<role>-<k>``."""
    return f"{app_id}-{_slug(role_name, 20)}-{replica_id}"[:HOSTNAME_MAX]


def rank0_hostname(app: AppDef, app_id: str) -> str:
    """The hostname of replica 0 of the first role (``$TETHER_RANK0_HOST``)."""
    return replica_hostname(app_id, app.roles[0].name, 0)


@dataclass
class ContainerRequest:
    """One replica's container.

    Attributes:
        name: The container's name (= its hostname).
        role: The role's name.
        replica_id: The replica's index.
        body: The ``POST /containers/create`` body (Engine API field names).
    """

    name: str
    role: str
    replica_id: int
    body: dict[str, Any]


@dataclass
class DockerRequest:
    """The native request of ``local_docker``: the app's network and its containers.

    Attributes:
        app_id: The app's id; also the network's name.
        network_labels: Labels of the network (it stands for the app in ``list``).
        images: Every image the containers run, pulled first when missing.
        containers: Every replica, role by role.
        pull: Pull missing images (else fail).
        stop_timeout: Seconds between SIGTERM and SIGKILL on cancel.
        builds: Workspace images to build (and push) before the containers start.
    """

    app_id: str
    network_labels: dict[str, str]
    images: list[str]
    containers: list[ContainerRequest] = field(default_factory=list)
    pull: bool = True
    stop_timeout: int = 10
    builds: list[ImagePlan] = field(default_factory=list)

    def with_addresses(self, subnet_hosts: list[str]) -> DockerRequest:
        """A copy whose containers have fixed IPs and every replica's name in ``/etc/hosts``.

        Args:
            subnet_hosts: Usable addresses of the app network, in order.

        Returns:
            The copy.

        Raises:
            ValueError: When the network has too few addresses for the replicas.
        """
        need = FIRST_HOST_OFFSET + len(self.containers)
        if len(subnet_hosts) < need:
            raise ValueError(
                f"network {self.app_id} has {len(subnet_hosts)} addresses; {need} are needed "
                f"for {len(self.containers)} replicas"
            )
        ips = {c.name: subnet_hosts[FIRST_HOST_OFFSET + i] for i, c in enumerate(self.containers)}
        extra_hosts = [f"{name}:{ip}" for name, ip in ips.items()]
        out = dataclasses.replace(self, containers=[])
        for c in self.containers:
            body = copy.deepcopy(c.body)
            hc = body.setdefault("HostConfig", {})
            hc["ExtraHosts"] = [*(hc.get("ExtraHosts") or []), *extra_hosts]
            endpoints = body.setdefault("NetworkingConfig", {}).setdefault("EndpointsConfig", {})
            endpoint = endpoints.setdefault(self.app_id, {})
            endpoint["IPAMConfig"] = {"IPv4Address": ips[c.name]}
            out.containers.append(dataclasses.replace(c, body=body))
        return out


def _mounts(role: Role) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    mounts: list[dict[str, Any]] = []
    devices: list[dict[str, str]] = []
    for m in role.mounts:
        if isinstance(m, BindMount):
            mounts.append({"Type": "bind", "Source": m.src_path, "Target": m.dst_path,
                           "ReadOnly": m.read_only})
        elif isinstance(m, VolumeMount):
            mounts.append({"Type": "volume", "Source": m.src, "Target": m.dst_path,
                           "ReadOnly": m.read_only})
        elif isinstance(m, DeviceMount):
            devices.append({"PathOnHost": m.src_path, "PathInContainer": m.dst_path,
                            "CgroupPermissions": m.permissions})
    return mounts, devices


def host_config(role: Role, opts: LocalDockerOpts) -> dict[str, Any]:
    """The ``HostConfig`` of a role's containers: limits, GPUs, mounts, ports, restarts.

    ``resource.cpu`` becomes ``NanoCpus``, ``memMB`` the memory limit (bytes), ``gpu`` a
    device request for that many GPUs (the NVIDIA container toolkit or CDI serves it);
    ``-1``/``0`` ask for nothing. ``port_map`` ports are published on random host ports.
    ``max_retries`` is the ``on-failure`` restart policy's maximum retry count.

    Args:
        role: The role.
        opts: The run options.

    Returns:
        The HostConfig (``ExtraHosts`` is filled at submission).
    """
    res = role.resource
    hc: dict[str, Any] = {"Privileged": opts.privileged}
    if res.cpu > 0:
        hc["NanoCpus"] = round(res.cpu * 1e9)
    if res.memMB > 0:
        hc["Memory"] = int(res.memMB) * 1024 * 1024
    if res.gpu > 0:
        hc["DeviceRequests"] = [
            {"Driver": "", "Count": int(res.gpu), "DeviceIDs": None,
             "Capabilities": [["gpu"]], "Options": {}}
        ]
    mounts, devices = _mounts(role)
    if mounts:
        hc["Mounts"] = mounts
    if devices:
        hc["Devices"] = devices
    if role.port_map:
        hc["PortBindings"] = {f"{p}/tcp": [{"HostIp": "", "HostPort": ""}]
                              for p in sorted(role.port_map.values())}
    if role.max_retries > 0:
        hc["RestartPolicy"] = {"Name": "on-failure", "MaximumRetryCount": role.max_retries}
    return hc


def render(
    app: AppDef, opts: LocalDockerOpts, app_id: str, created: float | None = None
) -> DockerRequest:
    """Renders every replica's container (pure).

    Args:
        app: The app (validated).
        opts: The run options.
        app_id: The submission's id (see :func:`make_app_id`).
        created: The submission time recorded in the labels (default: now).

    Returns:
        The request.
    """
    created = time.time() if created is None else created
    rank0 = rank0_hostname(app, app_id)
    job_key = app.metadata.get("tether.job_key")
    app_labels = {
        **opts.labels,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_APP_ID: app_id,
        LABEL_APP_NAME: app.name,
        LABEL_CREATED: f"{created:.3f}",
        LABEL_STOP_TIMEOUT: str(opts.stop_timeout),
    }
    if job_key:
        app_labels[LABEL_JOB_KEY] = str(job_key)
    req = DockerRequest(
        app_id=app_id,
        network_labels=dict(app_labels),
        images=sorted({r.image for r in app.roles}),
        pull=opts.pull,
        stop_timeout=opts.stop_timeout,
    )
    for role in app.roles:
        plan = role.metadata.get(METADATA_KEY)
        if isinstance(plan, ImagePlan) and all(b.image != plan.image for b in req.builds):
            req.builds.append(plan)
        spec = json.dumps({"name": role.name, "image": role.image, "entrypoint": role.entrypoint,
                           "args": role.args, "num_replicas": role.num_replicas,
                           "max_retries": role.max_retries,
                           "resource": {"cpu": role.resource.cpu, "gpu": role.resource.gpu,
                                        "memMB": role.resource.memMB}}, sort_keys=True)
        for k in range(role.num_replicas):
            name = replica_hostname(app_id, role.name, k)
            rep = materialize(role, app_id=app_id, replica_id=k, rank0_host=rank0)
            labels = {
                **app_labels,
                LABEL_ROLE: role.name,
                LABEL_REPLICA_ID: str(k),
                LABEL_MAX_RETRIES: str(role.max_retries),
                LABEL_ROLE_SPEC: spec,
            }
            body: dict[str, Any] = {
                "Image": rep.image,
                "Entrypoint": [rep.entrypoint] if rep.entrypoint else None,
                "Cmd": list(rep.args),
                "Env": [f"{k2}={v}" for k2, v in rep.env.items()],
                "Hostname": name,
                "Labels": labels,
                "HostConfig": {**host_config(rep, opts), "NetworkMode": app_id},
                "NetworkingConfig": {"EndpointsConfig": {app_id: {"Aliases": [name]}}},
            }
            if rep.port_map:
                body["ExposedPorts"] = {f"{p}/tcp": {} for p in sorted(rep.port_map.values())}
            # overlays last: the escape hatch wins over everything tether rendered
            apply_overlay(body, get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND))
            req.containers.append(ContainerRequest(name, role.name, k, body))
    return req


def format_request(req: DockerRequest) -> str:
    """The request as readable JSON, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    containers = []
    for c in req.containers:
        body = copy.deepcopy(c.body)
        env = dict(e.split("=", 1) for e in body.get("Env") or [])
        body["Env"] = [f"{k}={v}" for k, v in mask_env(env).items()]
        containers.append({"name": c.name, **body})
    doc: dict[str, Any] = {"network": {"Name": req.app_id, "Labels": req.network_labels},
                           "images": req.images, "containers": containers}
    if req.builds:
        doc["build"] = [b.summary() for b in req.builds]
    return json.dumps(doc, indent=2, sort_keys=True)
