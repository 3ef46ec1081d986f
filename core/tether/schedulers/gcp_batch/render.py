"""Pure rendering: AppDef + :class:`GcpBatchOpts` -> a Batch ``CreateJobRequest`` as a dict.

The dict uses the proto field names of ``google.cloud.batch_v1`` (``task_groups``,
``task_spec``, ``compute_resource``...), so ``batch_v1.CreateJobRequest(request)`` accepts it
as is; nothing here imports the package.

One task group (Batch runs one per job): ``task_count`` = ``parallelism`` = replicas, one task
per VM, and each task's environment from :func:`~tether.schedulers.replica.materialize`
(``task_environments``, one per task). With more than one replica, Batch writes the VMs' hosts
file and the container runs under ``/bin/sh -c`` to set ``$TETHER_RANK0_HOST`` from its first
line (and to expand ``${replica_id}`` in args per task).

Overlays (:mod:`tether.specs.overlays`, proto field names) are merged last:
``set_overlay(role, "gcp_batch", "TaskGroup", {...})`` into the role's task group, then
``set_overlay(app or role, "gcp_batch", "Job", {...})`` into the ``Job`` (the app's first,
then the role's), e.g. ``{"allocation_policy": {"network": {...}}}``. The labels tether finds
its jobs by cannot be changed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.gcp_batch.options import PROVISIONING_MODELS, GcpBatchOpts
from tether.schedulers.ids import AppIdRule
from tether.schedulers.replica import ENV_RANK0_HOST, ENV_REPLICA_ID, materialize
from tether.specs import AppDef, Role, SecretRef, macros
from tether.specs.overlays import apply_overlay, get_overlay
from tether.specs.secrets import mask_env

BACKEND = "gcp_batch"
LABEL_MANAGED_BY = "tether-managed-by"
LABEL_APP = "tether-app"
LABEL_ROLE = "tether-role"
LABEL_JOB_KEY = "tether-job-key"
MANAGED_BY = "tether"
OVERLAY_NAMESPACE = "gcp_batch"
OVERLAY_TASK_GROUP = "TaskGroup"
"""Kind of the role overlay merged into its task group."""
OVERLAY_JOB = "Job"
"""Kind of the app (or role) overlay merged into the Batch ``Job``."""
_KINDS = (OVERLAY_TASK_GROUP, OVERLAY_JOB)
PROJECT_ENVS = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")

_LABEL_JUNK = re.compile(r"[^a-z0-9_-]+")
_LABEL_OK = re.compile(r"^[a-z0-9_-]{0,63}$")
_DURATION = re.compile(r"^\d+(\.\d+)?s$")
_RID = "@@tether-replica-id@@"


class GcpBatchRenderError(SpecError):
    """An app or option that the ``gcp_batch`` scheduler cannot express."""


@dataclass
class GcpBatchRequest:
    """A rendered Batch submission.

    Attributes:
        app_id: ``project:location:job_id``.
        request: The ``CreateJobRequest`` as a dict (``parent``, ``job_id``, ``job``).
    """

    app_id: str
    request: dict[str, Any]


def resolve_project(opts: GcpBatchOpts) -> str:
    """The project: the option, else ``$GOOGLE_CLOUD_PROJECT``/``$CLOUDSDK_CORE_PROJECT``.

    Args:
        opts: The options.

    Returns:
        The project id.

    Raises:
        GcpBatchRenderError: When none is set.
    """
    if opts.project:
        return opts.project
    for name in PROJECT_ENVS:
        if os.environ.get(name):
            return os.environ[name]
    raise GcpBatchRenderError(
        "gcp_batch needs a Google Cloud project: set the run option project=... or "
        f"${PROJECT_ENVS[0]}"
    )


JOB_ID_RULE = AppIdRule(letter_prefix="app-")
"""Batch job ids: a lower-case letter first, ``[a-z0-9-]``, at most 63 characters (49 here)."""


def label_value(value: str) -> str:
    """A label value for ``value``: itself when it is one, else ``h-`` + a digest.

    Args:
        value: Any string.

    Returns:
        A valid label value.
    """
    if _LABEL_OK.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def resolve_image(image: str, repo: str | None) -> str:
    """``image`` prefixed with ``repo`` when it names no registry.

    Args:
        image: The role's image.
        repo: The ``image_repo`` option.

    Returns:
        The image URI.
    """
    if not repo or "/" in image:
        return image
    return f"{repo.rstrip('/')}/{image}"


def check(app: AppDef, opts: GcpBatchOpts) -> None:
    """Rejects what a Batch job cannot express, naming the field or role.

    Args:
        app: The app.
        opts: The options.

    Raises:
        GcpBatchRenderError: For a bad value.
    """
    if opts.provisioning_model not in PROVISIONING_MODELS:
        close = difflib.get_close_matches(opts.provisioning_model.upper(), PROVISIONING_MODELS, 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise GcpBatchRenderError(
            f"run option provisioning_model={opts.provisioning_model!r} is not one of "
            f"{', '.join(PROVISIONING_MODELS)}{hint}"
        )
    if opts.max_run_duration is not None and not _DURATION.match(opts.max_run_duration):
        raise GcpBatchRenderError(
            f"run option max_run_duration={opts.max_run_duration!r} is not a duration in "
            "seconds like 3600s"
        )
    for k in opts.labels:
        if not re.match(r"^[a-z][a-z0-9_-]{0,62}$", k):
            raise GcpBatchRenderError(
                f"run option labels: key {k!r} is not a label key (lower-case letter first, "
                "then [a-z0-9_-], at most 63)"
            )


def _argv_script(argv: list[str], multi: bool) -> list[str]:
    parts: list[str] = []
    for a in argv:
        pieces = [shlex.quote(p) if p else "" for p in a.split(_RID)]
        parts.append(f'"${ENV_REPLICA_ID}"'.join(pieces) or "''")
    head = (
        f"export {ENV_RANK0_HOST}=\"$(awk 'NR == 1 {{print $1}}' \"$BATCH_HOSTS_FILE\")\"; "
        if multi else ""
    )
    return ["-c", head + "exec " + " ".join(parts)]


def _runnable(role: Role, app_id: str, opts: GcpBatchOpts, multi: bool) -> dict[str, Any]:
    # the args are the same for every task: ${replica_id} becomes "$TETHER_REPLICA_ID",
    # expanded by the task's shell (the env itself comes from materialize, per task)
    templ = macros.Values(img_root="", app_id=app_id, replica_id=_RID).apply(role)
    argv = [templ.entrypoint, *templ.args]
    container: dict[str, Any] = {"image_uri": resolve_image(role.image, opts.image_repo)}
    if multi or any(_RID in a for a in argv):
        container["entrypoint"] = "/bin/sh"
        container["commands"] = _argv_script(argv, multi)
    else:
        container["entrypoint"] = argv[0]
        container["commands"] = argv[1:]
    return {"container": container}


def secret_version(ref: SecretRef, project: str) -> str:
    """The Secret Manager version a :class:`~tether.specs.SecretRef` stands for.

    ``name`` is a secret of the job's project (or a full ``projects/../secrets/..`` name);
    ``key`` is the version (default ``latest``).

    Args:
        ref: The reference.
        project: The job's project.

    Returns:
        ``projects/P/secrets/NAME/versions/VERSION``.
    """
    base = ref.name
    if not base.startswith("projects/"):
        base = f"projects/{project}/secrets/{ref.name}"
    return f"{base}/versions/{ref.key or 'latest'}"


def render(app: AppDef, opts: GcpBatchOpts, project: str, job_id: str) -> GcpBatchRequest:
    """Renders the ``CreateJobRequest`` of ``app`` (pure).

    Args:
        app: The app (validated, one role).
        opts: The options (checked).
        project: The project.
        job_id: The Batch job id.

    Returns:
        The request.
    """
    role = app.roles[0]
    n = role.num_replicas
    multi = n > 1
    envs = []
    for k in range(n):
        env = dict(materialize(role, app_id=job_id, replica_id=k,
                               rank0_host="" if multi else "localhost", img_root="").env)
        if multi:
            env.pop(ENV_RANK0_HOST)  # set by the container's shell from the hosts file
        envs.append({"variables": env})
    res = role.resource
    compute: dict[str, Any] = {}
    if res.cpu > 0:
        compute["cpu_milli"] = int(res.cpu * 1000)
    if res.memMB > 0:
        compute["memory_mib"] = int(res.memMB)
    task_spec: dict[str, Any] = {"runnables": [_runnable(role, job_id, opts, multi)]}
    if compute:
        task_spec["compute_resource"] = compute
    if role.secrets:
        task_spec["environment"] = {"secret_variables": {
            var: secret_version(ref, project) for var, ref in sorted(role.secrets.items())}}
    if role.max_retries > 0:
        task_spec["max_retry_count"] = role.max_retries
    if opts.max_run_duration:
        task_spec["max_run_duration"] = opts.max_run_duration
    group: dict[str, Any] = {
        "task_count": n,
        "parallelism": n,
        "task_count_per_node": 1,
        "task_spec": task_spec,
        "task_environments": envs,
    }
    if multi:
        group["require_hosts_file"] = True
        group["permissive_ssh"] = True
    policy: dict[str, Any] = {"provisioning_model": opts.provisioning_model}
    if opts.machine_type:
        policy["machine_type"] = opts.machine_type
    instance: dict[str, Any] = {"policy": policy}
    if res.gpu > 0:
        policy["accelerators"] = [{"type_": opts.accelerator_type, "count": res.gpu}]
        instance["install_gpu_drivers"] = True
    allocation: dict[str, Any] = {"instances": [instance]}
    if opts.service_account:
        allocation["service_account"] = {"email": opts.service_account}
    labels = {**{k: label_value(v) for k, v in opts.labels.items()},
              LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP: label_value(app.name),
              LABEL_ROLE: label_value(role.name)}
    if app.metadata.get(JOB_KEY):
        labels[LABEL_JOB_KEY] = label_value(app.metadata[JOB_KEY])
    job = {
        "task_groups": [group],
        "allocation_policy": allocation,
        "labels": labels,
        "logs_policy": {"destination": "CLOUD_LOGGING"},
    }
    _overlay(job, app)  # last: the platform's escape hatch wins
    parent = f"projects/{project}/locations/{opts.location}"
    return GcpBatchRequest(
        app_id=f"{project}:{opts.location}:{job_id}",
        request={"parent": parent, "job_id": job_id, "job": job},
    )


def _overlay(job: dict[str, Any], app: AppDef) -> None:
    """Merges the role's ``TaskGroup`` overlay, then the ``Job`` overlays, into ``job``.

    Raises:
        GcpBatchRenderError: For an overlay that changes tether's identity labels or the
            number of task groups.
    """
    role = app.roles[0]
    identity = {k: v for k, v in job["labels"].items() if k.startswith("tether-")}
    group_overlay = get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_TASK_GROUP, kinds=_KINDS)
    if group_overlay:
        apply_overlay(job["task_groups"][0], group_overlay)
    for where, target in ((f"app {app.name!r}", app), (f"role {role.name!r}", role)):
        overlay = get_overlay(target, OVERLAY_NAMESPACE, OVERLAY_JOB, kinds=_KINDS)
        if not overlay:
            continue
        apply_overlay(job, overlay)
        labels: dict[str, Any] = job["labels"] if isinstance(job.get("labels"), dict) else {}
        if any(labels.get(k) != v for k, v in identity.items()):
            raise GcpBatchRenderError(
                f"{where}: gcp_batch Job overlay may not change or remove the labels "
                f"{sorted(identity)}: tether finds its jobs by them"
            )
        if len(job.get("task_groups") or []) != 1:
            raise GcpBatchRenderError(
                f"{where}: gcp_batch Job overlay must leave exactly one task group (Batch runs "
                "one per job); use a TaskGroup overlay to change it"
            )


def format_request(req: GcpBatchRequest) -> str:
    """The request as JSON, secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    doc = json.loads(json.dumps(req.request))
    for group in doc["job"]["task_groups"]:
        for env in group.get("task_environments", []):
            env["variables"] = mask_env(env.get("variables", {}))
    return json.dumps(doc, indent=2, sort_keys=True)


def job_name(app_id: str) -> str:
    """``project:location:job`` -> ``projects/P/locations/L/jobs/J``.

    Args:
        app_id: The app id.

    Returns:
        The Batch resource name.

    Raises:
        GcpBatchRenderError: For an id of another shape.
    """
    parts = app_id.split(":")
    if len(parts) != 3 or not all(parts):
        raise GcpBatchRenderError(
            f"gcp_batch app id {app_id!r} is not project:location:job_id"
        )
    return f"projects/{parts[0]}/locations/{parts[1]}/jobs/{parts[2]}"


def app_id_of(name: str) -> str:
    """``projects/P/locations/L/jobs/J`` -> ``P:L:J``.

    Args:
        name: A Batch job resource name.

    Returns:
        The app id.
    """
    parts = name.split("/")
    return f"{parts[1]}:{parts[3]}:{parts[5]}" if len(parts) == 6 else name
