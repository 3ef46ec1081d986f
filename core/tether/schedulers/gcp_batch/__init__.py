"""``gcp_batch``: run apps as Google Cloud Batch jobs.

Prerequisites: a Google Cloud project with the Batch API enabled (the ``project`` run option
or ``$GOOGLE_CLOUD_PROJECT``), application default credentials (``gcloud auth
application-default login`` or ``$GOOGLE_APPLICATION_CREDENTIALS``), and
``pip install 'tether[gcp_batch]'`` (``google-cloud-batch``, imported only when tether talks
to Batch); ``google-cloud-logging`` to read logs. ``--dryrun`` renders the request offline.

Status here: **render-only**. Google Cloud cannot be reached from tether's test machines: the
request is golden-tested and accepted by the package's own ``batch_v1.CreateJobRequest``, and
the client code runs against a gRPC server in the test that implements ``BatchService`` with
the package's message types (a fake of the service, not of tether's code). Logs are untested.

**Design.** One Batch job per app with one task group (Batch runs one per job, so apps have
one role): ``task_count`` = ``parallelism`` = replicas, one task per VM, per-task
environments from :func:`~tether.schedulers.replica.materialize`, ``compute_resource`` from
the role's resource, GPUs as accelerators on the instance policy (drivers installed), retries
(``RetryPolicy.REPLICA``) as ``max_retry_count``, logs to Cloud Logging. With several
replicas Batch writes a hosts file and ``$TETHER_RANK0_HOST`` is its first line.

**Status** from ``JobStatus.State`` (:data:`tether.schedulers.gcp_batch.status.JOB_STATE`)
with the latest status event in ``msg``. **Cancel** is ``CancelJob`` (the job stays listed),
**delete** ``DeleteJob``. **Job identity**: labels ``tether-managed-by``, ``tether-app``,
``tether-job-key`` (the key, or a digest when it is not a valid label value); ``find_jobs``
is a label filter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.gcp_batch.scheduler import GcpBatchScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> GcpBatchScheduler:
    """Creates the ``gcp_batch`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.gcp_batch.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.gcp_batch.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
