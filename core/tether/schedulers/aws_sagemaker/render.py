"""Pure rendering: a one-role AppDef + :class:`AwsSageMakerOpts` -> ``create_training_job``
keyword arguments (boto3's ``sagemaker`` client).

The role's image runs with ``ContainerEntrypoint``/``ContainerArguments`` (the entrypoint
and args), ``Environment`` from :func:`~tether.schedulers.replica.materialize`,
``InstanceCount`` = replicas. With several instances every one runs the same request, so the
container starts under ``/bin/sh -c``: the replica index comes from the instance's host name
in ``/opt/ml/input/config/resourceconfig.json`` (``algo-1`` is replica 0) and
``$TETHER_RANK0_HOST`` is ``algo-1``.

Overlays stored with ``set_overlay(app_or_role, "aws_sagemaker", "CreateTrainingJob", ...)``
merge into the request last, the app's before the role's (e.g.
``{"VpcConfig": {...}}`` or ``{"ResourceConfig": {"KeepAlivePeriodInSeconds": 600}}``);
``TrainingJobName`` cannot change (it is the job's identity).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.aws_client import resolve_image
from tether.schedulers.aws_sagemaker.options import AwsSageMakerOpts
from tether.schedulers.ids import AppIdRule
from tether.schedulers.replica import ENV_RANK0_HOST, ENV_REPLICA_ID, materialize
from tether.specs import AppDef
from tether.specs.named_resources_aws import K8S_ITYPE
from tether.specs.overlays import OverlayError, apply_overlay, get_overlay
from tether.specs.secrets import mask_env

BACKEND = "aws_sagemaker"
OVERLAY_KIND = "CreateTrainingJob"
"""The overlay kind: the ``create_training_job`` keyword arguments."""
TAG_MANAGED_BY = "tether-managed-by"
TAG_APP = "tether-app"
TAG_ROLE = "tether-role"
TAG_JOB_KEY = "tether-job-key"
MANAGED_BY = "tether"
RANK0_HOST = "algo-1"
RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"
_NAME_JUNK = re.compile(r"[^A-Za-z0-9-]+")
_TAG_OK = re.compile(r"^[A-Za-z0-9 _.:/=+\-@]{0,256}$")
_RID = "@@tether-replica-id@@"


class AwsSageMakerRenderError(SpecError):
    """An app or option that a SageMaker training job cannot express."""


@dataclass
class AwsSageMakerRequest:
    """A rendered training job.

    Attributes:
        app_id: ``region:training_job_name``.
        region: The region.
        request: ``create_training_job`` kwargs.
    """

    app_id: str
    region: str
    request: dict[str, Any]


JOB_NAME_RULE = AppIdRule(max_base=54, allowed="A-Za-z0-9-", lower=False)
"""Training job names: ``[A-Za-z0-9-]``, at most 63 characters."""


def instance_type(app: AppDef, opts: AwsSageMakerOpts) -> str:
    """The instance type: the option, else ``ml.`` + the named resource's instance type.

    Args:
        app: The app.
        opts: The options.

    Returns:
        The instance type.

    Raises:
        AwsSageMakerRenderError: When neither gives one.
    """
    if opts.instance_type:
        return opts.instance_type
    itype = app.roles[0].resource.capabilities.get(K8S_ITYPE)
    if not itype:
        raise AwsSageMakerRenderError(
            f"role {app.roles[0].name!r}: no instance type; set the run option "
            "instance_type=ml.<type> or give the role an aws_* named resource "
            "(e.g. resource=aws_g5.2xlarge)"
        )
    return f"ml.{itype}"


def check(app: AppDef, opts: AwsSageMakerOpts) -> None:
    """Rejects what a training job cannot express, naming the field and the value.

    Args:
        app: The app.
        opts: The options.

    Raises:
        AwsSageMakerRenderError: For a bad value.
    """
    if len(app.roles) != 1:
        raise AwsSageMakerRenderError(
            f"app {app.name!r} has {len(app.roles)} roles "
            f"({', '.join(r.name for r in app.roles)}); a SageMaker training job runs one "
            "role (one image on InstanceCount instances): use aws_batch or kubernetes for "
            "multi-role apps"
        )
    if not opts.output_path.startswith("s3://"):
        raise AwsSageMakerRenderError(
            f"run option output_path={opts.output_path!r} is not an s3:// URI")
    if opts.checkpoint_s3_uri is not None and not opts.checkpoint_s3_uri.startswith("s3://"):
        raise AwsSageMakerRenderError(
            f"run option checkpoint_s3_uri={opts.checkpoint_s3_uri!r} is not an s3:// URI")
    if opts.max_wait_s is not None and not opts.spot:
        raise AwsSageMakerRenderError("run option max_wait_s needs spot=True")
    if opts.max_wait_s is not None and opts.max_wait_s < opts.max_runtime_s:
        raise AwsSageMakerRenderError(
            f"run option max_wait_s={opts.max_wait_s} is below max_runtime_s="
            f"{opts.max_runtime_s}")
    instance_type(app, opts)


def _tag(value: str) -> str:
    import hashlib

    return value if _TAG_OK.match(value) else "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def _sh_word(word: str) -> str:
    import shlex

    pieces = [shlex.quote(p) if p else "" for p in word.split(_RID)]
    return f'"${ENV_REPLICA_ID}"'.join(pieces) or "''"


def render(app: AppDef, opts: AwsSageMakerOpts, region: str, job_name: str
           ) -> AwsSageMakerRequest:
    """Renders ``create_training_job`` kwargs of ``app`` (pure).

    Args:
        app: The app (checked: one role).
        opts: The options (checked).
        region: The region.
        job_name: The training job name.

    Returns:
        The request.
    """
    role = app.roles[0]
    app_id = f"{region}:{job_name}"
    n = role.num_replicas
    image = resolve_image(role.image, opts.image_repo)
    algo: dict[str, Any] = {"TrainingImage": image, "TrainingInputMode": "File"}
    if n == 1:
        rep = materialize(role, app_id=app_id, replica_id=0, rank0_host="localhost")
        env = dict(rep.env)
        algo["ContainerEntrypoint"] = [rep.entrypoint]
        if rep.args:
            algo["ContainerArguments"] = list(rep.args)
    else:
        rep = materialize(role, app_id=app_id, replica_id=_RID,  # type: ignore[arg-type]
                          rank0_host=RANK0_HOST)
        env = {k: v for k, v in rep.env.items() if _RID not in v}
        lines = [
            f"h=$(sed -n 's/.*\"current_host\": *\"algo-\\([0-9]*\\)\".*/\\1/p' {RESOURCE_CONFIG})",
            f'export {ENV_REPLICA_ID}="$(( ${{h:-1}} - 1 ))"',
            *(f"export {k}={_sh_word(v)}" for k, v in sorted(rep.env.items()) if _RID in v
              and k != ENV_REPLICA_ID),
            "exec " + " ".join(_sh_word(a) for a in [rep.entrypoint, *rep.args]),
        ]
        algo["ContainerEntrypoint"] = ["/bin/sh", "-c", "\n".join(lines)]
    env[ENV_RANK0_HOST] = "localhost" if n == 1 else RANK0_HOST
    tags = {k: _tag(v) for k, v in opts.tags.items()}
    tags.update({TAG_MANAGED_BY: MANAGED_BY, TAG_APP: _tag(app.name), TAG_ROLE: _tag(role.name)})
    if app.metadata.get(JOB_KEY):
        tags[TAG_JOB_KEY] = _tag(app.metadata[JOB_KEY])
    stopping: dict[str, Any] = {"MaxRuntimeInSeconds": opts.max_runtime_s}
    request: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": algo,
        "RoleArn": opts.role_arn,
        "OutputDataConfig": {"S3OutputPath": opts.output_path},
        "ResourceConfig": {"InstanceType": instance_type(app, opts), "InstanceCount": n,
                           "VolumeSizeInGB": opts.volume_size_gb},
        "StoppingCondition": stopping,
        "Environment": dict(sorted(env.items())),
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
    }
    if opts.hyperparameters:
        request["HyperParameters"] = dict(sorted(opts.hyperparameters.items()))
    if opts.spot:
        request["EnableManagedSpotTraining"] = True
        stopping["MaxWaitTimeInSeconds"] = opts.max_wait_s or 2 * opts.max_runtime_s
    if opts.checkpoint_s3_uri:
        request["CheckpointConfig"] = {"S3Uri": opts.checkpoint_s3_uri,
                                       "LocalPath": opts.checkpoint_local_path}  # fmt: skip
    for target in (app, role):
        apply_overlay(request, get_overlay(target, BACKEND, OVERLAY_KIND))
    if request.get("TrainingJobName") != job_name:
        raise OverlayError(
            f"role {role.name!r}: an aws_sagemaker {OVERLAY_KIND} overlay cannot change "
            f"TrainingJobName ({job_name!r} -> {request.get('TrainingJobName')!r}): it is the "
            "job's identity; name the app instead"
        )
    return AwsSageMakerRequest(app_id=app_id, region=region, request=request)


def format_request(req: AwsSageMakerRequest) -> str:
    """The request as JSON (what ``--dryrun`` prints), secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    doc = json.loads(json.dumps({"region": req.region, "create_training_job": req.request}))
    body = doc["create_training_job"]
    body["Environment"] = mask_env(body.get("Environment", {}))
    return json.dumps(doc, indent=2, sort_keys=True)


def parse_app_id(app_id: str) -> tuple[str, str]:
    """``region:job_name`` -> its parts.

    Args:
        app_id: The app id.

    Returns:
        ``(region, job_name)``.

    Raises:
        AwsSageMakerRenderError: For an id of another shape.
    """
    region, _, name = app_id.partition(":")
    if not region or not name:
        raise AwsSageMakerRenderError(f"aws_sagemaker app id {app_id!r} is not region:job_name")
    return region, name
