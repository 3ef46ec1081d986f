"""``aws_batch``: run apps as AWS Batch jobs.

Prerequisites: ``pip install 'tether[aws]'`` (boto3, imported only when tether talks to
AWS), a job queue (the ``queue`` run option), a region (``region``, ``$AWS_REGION``,
``$AWS_DEFAULT_REGION`` or the profile's ``region``) and credentials from boto3's standard
chain (environment, ``~/.aws/credentials``, SSO, instance or container role; the ``profile``
run option picks a profile). Credentials are never read into a request, printed or put in a
dryrun. ``--dryrun`` renders the requests offline.

**Design.** One role with one replica becomes a *container job*; anything else a
*multi-node parallel* job whose node 0 (the main node) is replica 0 of the first role, with
node ranges per replica (up to five replicas) or per role (Batch allows five node groups, so
at most five roles). The job definition is named after a digest of its content and reused
when one of equal content is active (a container job's command and environment go with
``submit_job``); when the submission fails, a definition registered for it is deregistered.
``$TETHER_RANK0_HOST`` comes from ``$AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``.
Resources: ``VCPU`` (rounded up), ``MEMORY`` in MiB (the ``aws_*`` named resources already
leave the memory tax free, since Batch never places a job that asks for all of an instance's
memory), ``GPU``; EFA devices of the named resource and device mounts as
``linuxParameters.devices``; bind mounts as host volumes, volume mounts as EFS file systems
(``fs-id[:/root]``); secrets as ``secrets`` (a Secrets Manager or SSM ARN, ``:key::`` for a
JSON key). Overlays: ``set_overlay(role, "aws_batch", "ContainerProperties", {...})`` merges
into the role's ``containerProperties`` last (``linuxParameters``, ``ulimits``...).

**Retries** (``RetryPolicy.APPLICATION``): ``retryStrategy.attempts = max_retries + 1`` with
``evaluateOnExit`` (image pull errors exit, every other failure retries; Batch never retries a
terminated job). **Status** from ``describe_jobs``
(:data:`tether.schedulers.aws_batch.status.JOB_STATUS`) with ``statusReason``, the exit code
and the container's reason in ``msg``. **Logs** from CloudWatch Logs (``/aws/batch/job``,
the stream of the latest attempt; per node for multi-node jobs), with ``since``/``until`` and
tailing. **Cancel** is ``terminate_job`` (idempotent; the job ends FAILED with the reason
``cancelled by tether`` and tether reports CANCELLED). **Delete** tags the job
``tether-deleted`` (Batch cannot delete jobs). **Job identity** and ``list``: the tags
``tether-managed-by``, ``tether-app``, ``tether-roles`` and ``tether-job-key``; ``list`` and
``find_jobs`` read the queue's jobs (or every queue's) with ``list_jobs`` and their tags with
``describe_jobs``. Calls use botocore's adaptive retry mode (throttling is retried).

Try it locally: the tests run it against moto's server, whose Batch jobs run as real
containers through podman's Docker API (``tests/e2e/infra/moto.py``)::

    AWS_ENDPOINT_URL=http://127.0.0.1:5000 tether run -s aws_batch -cfg queue=q,region=us-east-1 \\
        utils.echo --msg hi --image localhost/bb:latest
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> AwsBatchScheduler:
    """Creates the ``aws_batch`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.aws_batch.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.aws_batch.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
