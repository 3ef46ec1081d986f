"""``aws_sagemaker``: run one-role apps as SageMaker training jobs.

Prerequisites: ``pip install 'tether[aws]'`` (boto3, imported only when tether talks to
AWS), an IAM role SageMaker may assume (``role_arn``), an S3 output path (``output_path``),
a region and credentials from boto3's standard chain (as ``aws_batch``). ``--dryrun``
renders the request offline.

**Design.** One training job per app; the app has exactly one role (a training job runs one
image; multi-role apps are rejected at dryrun, pointing to ``aws_batch``/``kubernetes``).
``InstanceCount`` = replicas; the instance type is the ``instance_type`` option or
``ml.<type>`` of the role's ``aws_*`` named resource; the image runs with
``ContainerEntrypoint``/``ContainerArguments`` and ``Environment`` (the ``TETHER_*``
replica environment; with several instances the replica index comes from the host name
``algo-N`` and ``$TETHER_RANK0_HOST`` is ``algo-1``); ``hyperparameters``; ``max_runtime_s``;
managed spot training (``spot``, ``max_wait_s``) with checkpoints synced to
``checkpoint_s3_uri``. No retry policy (SageMaker does not restart a failed job).

**Status** from ``describe_training_job``
(:data:`tether.schedulers.aws_sagemaker.status.JOB_STATUS`) with ``FailureReason`` and the
latest secondary status in ``msg``. **Logs** from CloudWatch Logs
(``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-<k+1>-...`` of replica ``k``).
**Cancel** is ``stop_training_job`` (Stopped -> CANCELLED). **List** and job identity: the
tags ``tether-managed-by``, ``tether-app``, ``tether-role`` and ``tether-job-key``.

Status here: tested against moto's server, which records training jobs (they are Completed
at once) but runs nothing: render, submit, describe, list and the error paths are real API
calls; stop is checked on the wire only (moto has no StopTrainingJob).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.aws_sagemaker.scheduler import AwsSageMakerScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> AwsSageMakerScheduler:
    """Creates the ``aws_sagemaker`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.aws_sagemaker.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.aws_sagemaker.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
