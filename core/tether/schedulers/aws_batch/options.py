"""Run options of ``aws_batch`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.specs import StructuredOpts


@dataclass
class AwsBatchOpts(StructuredOpts):
    """Run options of the ``aws_batch`` scheduler."""

    queue: str
    """Job queue to submit to (name or ARN). Required."""

    region: str | None = None
    """AWS region (default: ``$AWS_REGION``, ``$AWS_DEFAULT_REGION`` or the profile's
    ``region`` in ``~/.aws/config``). It becomes part of the app id, so later status, logs
    and cancel go to the same region."""

    profile: str | None = None
    """Named profile of ``~/.aws/config``/``~/.aws/credentials`` (default: ``$AWS_PROFILE`` or
    boto3's default chain). Credentials are never read into the request."""

    share_identifier: str | None = None
    """Fair-share identifier (``shareIdentifier``) for queues with a fair-share policy."""

    priority: int | None = None
    """Scheduling priority (``schedulingPriorityOverride``) for fair-share queues: higher
    runs first."""

    image_repo: str | None = None
    """Registry/repository prefixed to role images that name none (``trainer:1`` becomes
    ``<image_repo>/trainer:1``), e.g. ``123456789012.dkr.ecr.us-east-1.amazonaws.com``."""

    execution_role_arn: str | None = None
    """IAM role ECS uses to pull images and read secrets (``executionRoleArn``)."""

    job_role_arn: str | None = None
    """IAM role the job's containers assume (``jobRoleArn``)."""

    tags: dict[str, str] = field(default_factory=dict)
    """Extra tags on the job and its job definition (tether's own ``tether-*`` tags win)."""

    timeout_s: int | None = None
    """Longest run of one attempt in seconds (``timeout.attemptDurationSeconds``, >= 60)."""

    privileged: bool = False
    """Run the containers privileged."""

    ulimits: list[str] = field(default_factory=list)
    """Container ulimits as ``name=soft:hard`` (``nofile=65536:65536``)."""

    host_volumes: list[str] = field(default_factory=list)
    """Host paths mounted into every container as ``SRC:DST[:ro]`` (Batch host volumes),
    e.g. an instance's NVMe storage ``/scratch:/scratch``; a role's own mounts add to them."""

    shm_size_mb: int | None = None
    """Size of ``/dev/shm`` in MiB (``linuxParameters.sharedMemorySize``)."""
