"""Pure rendering: AppDef + :class:`AwsBatchOpts` -> ``register_job_definition`` and
``submit_job`` keyword arguments (boto3's ``batch`` client).

* One role with one replica is a **container job**. Its job definition holds what does not
  change between runs (image, resources, roles, mounts, retries, timeout), so it is named by
  a digest of its content and reused; the command and environment go into
  ``containerOverrides`` of ``submit_job``.
* Anything else is a **multi-node parallel job** (node 0 is replica 0 of the first role, the
  main node). With at most five replicas in all, every replica is a node range of its own with
  its exact environment; with more, every role is one node range (Batch allows five node
  groups) and the replica index is ``$AWS_BATCH_JOB_NODE_INDEX`` minus the role's first node.
  Each node starts under ``/bin/sh -c`` to set ``$TETHER_RANK0_HOST`` from
  ``$AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS`` (set by Batch on the other nodes; the
  main node uses its own address).

Overlays stored with ``set_overlay(role, "aws_batch", "ContainerProperties", ...)`` merge into
each of the role's ``containerProperties`` as the last step.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.aws_batch.options import AwsBatchOpts
from tether.schedulers.aws_client import resolve_image
from tether.schedulers.ids import AppIdRule
from tether.schedulers.replica import ENV_RANK0_HOST, ENV_REPLICA_ID, materialize
from tether.specs import AppDef, BindMount, DeviceMount, Role, SecretRef, VolumeMount
from tether.specs.named_resources_aws import EFA_DEVICE, K8S_ITYPE
from tether.specs.overlays import apply_overlay, get_overlay
from tether.specs.secrets import mask_env

BACKEND = "aws_batch"
TAG_MANAGED_BY = "tether-managed-by"
TAG_APP = "tether-app"
TAG_ROLES = "tether-roles"
TAG_JOB_KEY = "tether-job-key"
TAG_DELETED = "tether-deleted"
MANAGED_BY = "tether"
MAX_NODE_GROUPS = 5
"""Batch runs at most five node groups (node ranges) in one multi-node parallel job."""
MAX_ATTEMPTS = 10
MIN_TIMEOUT_S = 60
DEFAULT_VCPUS = 1
DEFAULT_MEMORY_MB = 2048
MAIN_NODE_ADDR_ENV = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
NODE_INDEX_ENV = "AWS_BATCH_JOB_NODE_INDEX"
OVERLAY_NAMESPACE = "aws_batch"
OVERLAY_KIND = "ContainerProperties"
JOB_DEFINITION_PLACEHOLDER = "<the registered job definition's ARN>"
EVALUATE_ON_EXIT: list[dict[str, str]] = [
    {"onReason": "CannotPullContainerError*", "action": "EXIT"},
    {"onExitCode": "*", "action": "RETRY"},
]
"""Retry rules: an image that cannot be pulled fails at once; any other failure is retried
(cancelled jobs never are)."""

_RID = "@@tether-replica-id@@"
_NAME_JUNK = re.compile(r"[^A-Za-z0-9_-]+")
_TAG_OK = re.compile(r"^[A-Za-z0-9 _.:/=+\-@%]{0,256}$")
"""Characters Batch allows in tag values."""
_ULIMIT = re.compile(r"^([a-z]+)=(\d+)(?::(\d+))?$")


class AwsBatchRenderError(SpecError):
    """An app or option that the ``aws_batch`` scheduler cannot express."""


@dataclass
class AwsBatchRequest:
    """A rendered Batch submission.

    Attributes:
        app_id: ``region:queue:job_name`` (the ``${app_id}`` macro's value).
        region: The region it is submitted to.
        job_definition: ``register_job_definition`` kwargs (its name is a content digest).
        submit: ``submit_job`` kwargs; ``jobDefinition`` is filled in when submitting.
    """

    app_id: str
    region: str
    job_definition: dict[str, Any]
    submit: dict[str, Any]


JOB_NAME_RULE = AppIdRule(max_base=100, allowed="A-Za-z0-9_-", lower=False, trim="-_")
"""Batch job names: ``[A-Za-z0-9_-]``, a letter or digit first, at most 128 characters."""


def tag_value(value: str) -> str:
    """A Batch tag value for ``value``: itself when allowed, else ``h-`` + a digest.

    Args:
        value: Any string.

    Returns:
        A valid tag value.
    """
    if _TAG_OK.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def parse_ulimit(spec: str) -> dict[str, Any]:
    """``nofile=1024:2048`` -> a Batch ulimit.

    Args:
        spec: ``name=soft[:hard]``.

    Returns:
        ``{"name", "softLimit", "hardLimit"}``.

    Raises:
        AwsBatchRenderError: For another shape.
    """
    m = _ULIMIT.match(spec)
    if not m:
        raise AwsBatchRenderError(
            f"run option ulimits: {spec!r} is not name=soft[:hard] (e.g. nofile=65536:65536)"
        )
    soft = int(m.group(2))
    return {"name": m.group(1), "softLimit": soft, "hardLimit": int(m.group(3) or soft)}


def parse_host_volume(spec: str) -> BindMount:
    """``SRC:DST[:ro|rw]`` -> a bind mount.

    Args:
        spec: The ``host_volumes`` entry.

    Returns:
        The mount.

    Raises:
        AwsBatchRenderError: For another shape.
    """
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(p.startswith("/") for p in parts[:2]) or (
            len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise AwsBatchRenderError(
            f"run option host_volumes: {spec!r} is not SRC:DST[:ro] with absolute paths "
            "(e.g. /scratch:/scratch or /data:/data:ro)"
        )
    return BindMount(parts[0], parts[1], read_only=len(parts) == 3 and parts[2] == "ro")


def check(app: AppDef, opts: AwsBatchOpts) -> None:
    """Rejects what a Batch job cannot express, naming the field, the value and the limit.

    Args:
        app: The app.
        opts: The options.

    Raises:
        AwsBatchRenderError: For a bad value.
    """
    if not opts.queue:
        raise AwsBatchRenderError("run option queue is empty; name a Batch job queue")
    if len(app.roles) > MAX_NODE_GROUPS:
        raise AwsBatchRenderError(
            f"the app has {len(app.roles)} roles; aws_batch runs at most {MAX_NODE_GROUPS} "
            "(one node group each in a multi-node parallel job)"
        )
    for role in app.roles:
        if role.max_retries + 1 > MAX_ATTEMPTS:
            raise AwsBatchRenderError(
                f"role {role.name!r}: max_retries={role.max_retries} exceeds Batch's limit of "
                f"{MAX_ATTEMPTS} attempts (max_retries <= {MAX_ATTEMPTS - 1})"
            )
    if opts.timeout_s is not None and opts.timeout_s < MIN_TIMEOUT_S:
        raise AwsBatchRenderError(
            f"run option timeout_s={opts.timeout_s} is below Batch's minimum of "
            f"{MIN_TIMEOUT_S} seconds"
        )
    for spec in opts.ulimits:
        parse_ulimit(spec)
    for spec in opts.host_volumes:
        parse_host_volume(spec)
    if opts.shm_size_mb is not None and opts.shm_size_mb <= 0:
        raise AwsBatchRenderError(f"run option shm_size_mb={opts.shm_size_mb} must be > 0")
    itypes = {r.resource.capabilities.get(K8S_ITYPE) for r in app.roles}
    if len(itypes) > 1 and sum(r.num_replicas for r in app.roles) > 1:
        raise AwsBatchRenderError(
            "all node groups of a multi-node parallel job must use one instance type; the "
            f"roles ask for {sorted(str(t) for t in itypes)}"
        )


def secret_value_from(ref: SecretRef) -> str:
    """The ``valueFrom`` of a secret: the ARN, with ``:key::`` for a JSON key.

    Args:
        ref: The reference (``name`` is a Secrets Manager or SSM Parameter ARN).

    Returns:
        The ``valueFrom``.
    """
    return f"{ref.name}:{ref.key}::" if ref.key else ref.name


def _permissions(perm: str) -> list[str]:
    names = {"r": "READ", "w": "WRITE", "m": "MKNOD"}
    return [names[c] for c in "rwm" if c in perm]


def _resources(role: Role) -> list[dict[str, str]]:
    res = role.resource
    vcpus = max(1, math.ceil(res.cpu)) if res.cpu > 0 else DEFAULT_VCPUS
    mem = int(res.memMB) if res.memMB > 0 else DEFAULT_MEMORY_MB
    reqs = [{"type": "VCPU", "value": str(vcpus)}, {"type": "MEMORY", "value": str(mem)}]
    if res.gpu > 0:
        reqs.append({"type": "GPU", "value": str(res.gpu)})
    return reqs


def _container(role: Role, opts: AwsBatchOpts) -> dict[str, Any]:
    """The role's ``containerProperties`` without command and environment."""
    props: dict[str, Any] = {
        "image": resolve_image(role.image, opts.image_repo),
        "resourceRequirements": _resources(role),
    }
    if opts.job_role_arn:
        props["jobRoleArn"] = opts.job_role_arn
    if opts.execution_role_arn:
        props["executionRoleArn"] = opts.execution_role_arn
    if opts.privileged:
        props["privileged"] = True
    if opts.ulimits:
        props["ulimits"] = [parse_ulimit(u) for u in opts.ulimits]
    volumes: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    mounts = [*(parse_host_volume(v) for v in opts.host_volumes), *role.mounts]
    for i, m in enumerate(mounts):
        name = f"mount-{i}"
        if isinstance(m, BindMount):
            volumes.append({"name": name, "host": {"sourcePath": m.src_path}})
            points.append({"sourceVolume": name, "containerPath": m.dst_path,
                           "readOnly": m.read_only})  # fmt: skip
        elif isinstance(m, VolumeMount):
            fs, _, root = m.src.partition(":")
            efs: dict[str, Any] = {"fileSystemId": fs, "transitEncryption": "ENABLED"}
            if root:
                efs["rootDirectory"] = root
            volumes.append({"name": name, "efsVolumeConfiguration": efs})
            points.append({"sourceVolume": name, "containerPath": m.dst_path,
                           "readOnly": m.read_only})  # fmt: skip
        elif isinstance(m, DeviceMount):
            devices.append({"hostPath": m.src_path, "containerPath": m.dst_path,
                            "permissions": _permissions(m.permissions)})  # fmt: skip
    for i in range(int(role.resource.devices.get(EFA_DEVICE, 0))):
        path = f"/dev/infiniband/uverbs{i}"
        devices.append({"hostPath": path, "containerPath": path,
                        "permissions": ["READ", "WRITE", "MKNOD"]})  # fmt: skip
    if volumes:
        props["volumes"] = volumes
        props["mountPoints"] = points
    linux: dict[str, Any] = {}
    if devices:
        linux["devices"] = devices
    if opts.shm_size_mb:
        linux["sharedMemorySize"] = opts.shm_size_mb
    if linux:
        props["linuxParameters"] = linux
    if role.secrets:
        props["secrets"] = [{"name": var, "valueFrom": secret_value_from(ref)}
                            for var, ref in sorted(role.secrets.items())]  # fmt: skip
    return props


def _env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def _sh_word(word: str) -> str:
    """A shell word for ``word`` where the replica placeholder expands ``$TETHER_REPLICA_ID``."""
    pieces = [shlex.quote(p) if p else "" for p in word.split(_RID)]
    return f'"${ENV_REPLICA_ID}"'.join(pieces) or "''"


def node_script(argv: list[str], env: dict[str, str], first_node: int | None) -> str:
    """The ``/bin/sh -c`` script of a multi-node replica.

    Args:
        argv: Entrypoint and args (may hold the replica placeholder when ``first_node`` is set).
        env: Variables whose values hold the placeholder (exported by the script).
        first_node: The role's first node index when the replica index is computed from
            ``$AWS_BATCH_JOB_NODE_INDEX``; None when the node range is the replica itself.

    Returns:
        The script.
    """
    lines = [
        f'h="${{{MAIN_NODE_ADDR_ENV}:-}}"',
        '[ -n "$h" ] || h="$(hostname -i 2>/dev/null | cut -d" " -f1)"',
        '[ -n "$h" ] || h=localhost',
        f'export {ENV_RANK0_HOST}="$h"',
    ]
    if first_node is not None:
        lines.append(f'export {ENV_REPLICA_ID}="$(( {NODE_INDEX_ENV} - {first_node} ))"')
    for k, v in sorted(env.items()):
        lines.append(f"export {k}={_sh_word(v)}")
    lines.append("exec " + " ".join(_sh_word(a) for a in argv))
    return "\n".join(lines)


def _finish(role: Role, props: dict[str, Any]) -> dict[str, Any]:
    # Overlays last: the platform team's escape hatch wins over everything tether rendered.
    apply_overlay(props, get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND))
    return props


def _node_ranges(app: AppDef, app_id: str, opts: AwsBatchOpts) -> list[dict[str, Any]]:
    total = sum(r.num_replicas for r in app.roles)
    per_replica = total <= MAX_NODE_GROUPS
    ranges: list[dict[str, Any]] = []
    start = 0
    for role in app.roles:
        n = role.num_replicas
        itype = role.resource.capabilities.get(K8S_ITYPE)
        for k in range(n) if per_replica else [None]:
            rep = materialize(role, app_id=app_id, replica_id=_RID if k is None else k,  # type: ignore[arg-type]
                              rank0_host="", img_root="")  # fmt: skip
            env = dict(rep.env)
            env.pop(ENV_RANK0_HOST)  # set by the node's script
            if k is None:
                env.pop(ENV_REPLICA_ID)  # computed by the node's script
            shell_env = {n_: v for n_, v in env.items() if _RID in v}
            plain_env = {n_: v for n_, v in env.items() if _RID not in v}
            props = _container(role, opts)
            props["command"] = ["/bin/sh", "-c", node_script(
                [rep.entrypoint, *rep.args], shell_env, start if k is None else None)]
            props["environment"] = _env_list(plain_env)
            first, last = (start + k, start + k) if k is not None else (start, start + n - 1)
            node: dict[str, Any] = {"targetNodes": f"{first}:{last}",
                                    "container": _finish(role, props)}  # fmt: skip
            if itype:
                node["instanceTypes"] = [str(itype)]
            ranges.append(node)
        start += n
    return ranges


def definition_name(app_name: str, body: dict[str, Any]) -> str:
    """``tether-{app name}-{digest of the definition}``: equal content, equal name.

    Args:
        app_name: The app's name.
        body: The job definition without its name.

    Returns:
        The job definition name.
    """
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    base = _NAME_JUNK.sub("-", app_name).strip("-_")[:80].strip("-_") or "app"
    return f"tether-{base}-{digest}"


def render(app: AppDef, opts: AwsBatchOpts, region: str, job_name: str) -> AwsBatchRequest:
    """Renders the job definition and the submission of ``app`` (pure).

    Args:
        app: The app (validated and checked).
        opts: The options (checked).
        region: The region.
        job_name: The Batch job name.

    Returns:
        The request.
    """
    app_id = f"{region}:{queue_name(opts.queue)}:{job_name}"
    tags = {k: tag_value(v) for k, v in opts.tags.items()}
    tags.update({
        TAG_MANAGED_BY: MANAGED_BY,
        TAG_APP: tag_value(app.name),
        TAG_ROLES: " ".join(f"{r.name}:{r.num_replicas}" for r in app.roles),
    })
    if app.metadata.get(JOB_KEY):
        tags[TAG_JOB_KEY] = tag_value(app.metadata[JOB_KEY])
    body: dict[str, Any] = {"platformCapabilities": ["EC2"], "propagateTags": True}
    submit: dict[str, Any] = {
        "jobName": job_name,
        "jobQueue": opts.queue,
        "jobDefinition": JOB_DEFINITION_PLACEHOLDER,
        "tags": tags,
        "propagateTags": True,
    }
    if sum(r.num_replicas for r in app.roles) == 1:
        role = app.roles[0]
        rep = materialize(role, app_id=app_id, replica_id=0, rank0_host="localhost")
        props = _container(role, opts)
        props["command"] = [rep.entrypoint, *rep.args]
        props["environment"] = _env_list(rep.env)
        props = _finish(role, props)
        # the run's own command and environment go with the submission; the definition keeps
        # what is the same for every run, so it is reused
        submit["containerOverrides"] = {
            "command": props.pop("command"),
            "environment": props.pop("environment"),
        }
        body.update(type="container", containerProperties=props)
    else:
        ranges = _node_ranges(app, app_id, opts)
        body.update(type="multinode", nodeProperties={
            "numNodes": sum(r.num_replicas for r in app.roles),
            "mainNode": 0,
            "nodeRangeProperties": ranges,
        })
    retries = max(r.max_retries for r in app.roles)
    if retries > 0:
        body["retryStrategy"] = {"attempts": retries + 1,
                                 "evaluateOnExit": [dict(r) for r in EVALUATE_ON_EXIT]}  # fmt: skip
    if opts.timeout_s:
        body["timeout"] = {"attemptDurationSeconds": opts.timeout_s}
    def_tags = {TAG_MANAGED_BY: MANAGED_BY, TAG_APP: tag_value(app.name)}
    body["tags"] = def_tags
    job_def = {"jobDefinitionName": definition_name(app.name, body), **body}
    if opts.share_identifier:
        submit["shareIdentifier"] = opts.share_identifier
    if opts.priority is not None:
        submit["schedulingPriorityOverride"] = opts.priority
    return AwsBatchRequest(app_id=app_id, region=region, job_definition=job_def, submit=submit)


def _mask_container(props: dict[str, Any]) -> None:
    env = props.get("environment")
    if env:
        masked = mask_env({e["name"]: e["value"] for e in env})
        props["environment"] = _env_list(masked)


def format_request(req: AwsBatchRequest) -> str:
    """The request as JSON (what ``--dryrun`` prints), secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    doc = json.loads(json.dumps({
        "region": req.region,
        "register_job_definition": req.job_definition,
        "submit_job": req.submit,
    }))
    _mask_container(doc["register_job_definition"].get("containerProperties", {}))
    for node in doc["register_job_definition"].get("nodeProperties", {}).get(
            "nodeRangeProperties", []):
        _mask_container(node.get("container", {}))
    _mask_container(doc["submit_job"].get("containerOverrides", {}))
    return json.dumps(doc, indent=2, sort_keys=True)


def queue_name(queue: str) -> str:
    """The name of a job queue given by name or ARN (``...:job-queue/NAME``).

    Args:
        queue: Name or ARN.

    Returns:
        The name.
    """
    return queue.rpartition("job-queue/")[2]


def parse_app_id(app_id: str) -> tuple[str, str, str]:
    """``region:queue:job_name`` -> its parts.

    Args:
        app_id: The app id.

    Returns:
        ``(region, queue name, job_name)``.

    Raises:
        AwsBatchRenderError: For an id of another shape.
    """
    region, _, rest = app_id.partition(":")
    queue, _, name = rest.partition(":")
    if not region or not queue or not name:
        raise AwsBatchRenderError(f"aws_batch app id {app_id!r} is not region:queue:job_name")
    return region, queue, name
