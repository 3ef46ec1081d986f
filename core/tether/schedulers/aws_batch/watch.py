"""Following every followed AWS Batch job of a queue with batched ``DescribeJobs`` calls.

Each read asks ``DescribeJobs`` about every followed job of the view's region and queue, 100
ids a call (the API's limit), so N jobs cost ``ceil(N/100)`` calls per interval, not N. A
job's id is found once (the scheduler caches it). A job the answer does not show is
confirmed by ``describe`` before anyone hears it is gone; a throttled or failed call is no
news (the scheduler's client retries with backoff, then the read is retried).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.aws_batch.render import TAG_DELETED, parse_app_id
from tether.schedulers.aws_batch.scheduler import DESCRIBE_BATCH, AwsBatchScheduler
from tether.schedulers.watch.events import FollowTarget, view_target


class BatchReader:
    """Reads the followed jobs of one region and queue (see the module docs).

    Args:
        scheduler: The scheduler (its clients and job-id cache).
        region: The view's region.
    """

    def __init__(self, scheduler: AwsBatchScheduler, region: str) -> None:
        self._scheduler = scheduler
        self._region = region
        self.describe_calls = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """``DescribeJobs`` for every followed job, 100 ids a call.

        Args:
            app_ids: ``region:queue:job_name`` of the followed jobs.

        Returns:
            The jobs the answers show (and ``delete`` did not mark).
        """
        job_ids: dict[str, str] = {}
        for app_id in sorted(app_ids):
            job_id = self._scheduler._job_id(app_id)  # cached after the first lookup
            if job_id is not None:
                job_ids[job_id] = app_id
        if not job_ids:
            return {}
        self.describe_calls += math.ceil(len(job_ids) / DESCRIBE_BATCH)
        jobs = self._scheduler._describe_ids(self._region, sorted(job_ids))
        out: dict[str, DescribeAppResponse] = {}
        for job in jobs:
            owner = job_ids.get(str(job.get("jobId")))
            if owner is not None and not (job.get("tags") or {}).get(TAG_DELETED):
                out[owner] = self._scheduler.describe_job(owner, job)
        return out

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one job.

        Args:
            app_id: The job.

        Returns:
            Its description, or None when Batch does not know it (or it was deleted).
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the job's region and queue, for the scheduler's credentials and endpoint.

    Args:
        scheduler: An :class:`AwsBatchScheduler`.
        app_id: ``region:queue:job_name``.

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    region, queue, _ = parse_app_id(app_id)
    return view_target(
        scheduler, AwsBatchScheduler,
        lambda s: f"{s._profile or 'default'}@{s._endpoint_url or 'aws'}",
        lambda s: BatchReader(s, region), queue, region,
    )  # fmt: skip
