"""Run options of ``aws_sagemaker`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.specs import StructuredOpts


@dataclass
class AwsSageMakerOpts(StructuredOpts):
    """Run options of the ``aws_sagemaker`` scheduler."""

    role_arn: str
    """IAM role SageMaker runs the training job as (``RoleArn``). Required."""

    output_path: str
    """S3 URI for the job's output (``OutputDataConfig.S3OutputPath``). Required."""

    region: str | None = None
    """AWS region (default: ``$AWS_REGION``, ``$AWS_DEFAULT_REGION`` or the profile's)."""

    profile: str | None = None
    """Named profile of ``~/.aws/config`` (default: boto3's chain)."""

    instance_type: str | None = None
    """Training instance type, e.g. ``ml.p4d.24xlarge`` (default: the role's ``aws_*`` named
    resource, with ``ml.`` prefixed)."""

    volume_size_gb: int = 30
    """Size of each instance's ML storage volume in GB."""

    max_runtime_s: int = 86400
    """Longest run in seconds (``StoppingCondition.MaxRuntimeInSeconds``)."""

    spot: bool = False
    """Managed spot training (``EnableManagedSpotTraining``); give ``checkpoint_s3_uri`` so a
    reclaimed job resumes."""

    max_wait_s: int | None = None
    """With ``spot``: longest wait for spot capacity plus run, in seconds (default: twice
    ``max_runtime_s``)."""

    checkpoint_s3_uri: str | None = None
    """S3 URI that ``checkpoint_local_path`` is synced to (``CheckpointConfig``)."""

    checkpoint_local_path: str = "/opt/ml/checkpoints"
    """Directory in the container that SageMaker syncs with ``checkpoint_s3_uri``."""

    image_repo: str | None = None
    """Registry prefixed to role images that name none (an ECR registry)."""

    hyperparameters: dict[str, str] = field(default_factory=dict)
    """Hyperparameters (``HyperParameters``; SageMaker writes them to
    ``/opt/ml/input/config/hyperparameters.json``)."""

    tags: dict[str, str] = field(default_factory=dict)
    """Extra tags on the training job (tether's own ``tether-*`` tags win)."""
