"""Following every followed SageMaker training job of a region with ``ListTrainingJobs``.

SageMaker has no batched describe. Each read lists the region's training jobs created since
the oldest followed one (``ListTrainingJobs``, 100 a page: status and last change of each)
and describes a followed job (``DescribeTrainingJob`` and its tags) only when its status or
last-modified time changed since the reader last described it, or the first time it is
followed: N quiet jobs cost the listing's pages per interval, not N describes. A job the
listing does not show is confirmed by ``describe`` before anyone hears it is gone; a
throttled or failed call is no news (the client retries with backoff, then the read is
retried).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.aws_sagemaker.scheduler import AwsSageMakerScheduler
from tether.schedulers.watch.events import FollowTarget, view_target

SLACK = timedelta(minutes=5)
"""How much earlier than the oldest followed job the listing starts (clock skew)."""


class SageMakerReader:
    """Reads the followed training jobs of one region (see the module docs).

    Args:
        scheduler: The scheduler (its clients).
        region: The view's region.
    """

    def __init__(self, scheduler: AwsSageMakerScheduler, region: str) -> None:
        self._scheduler = scheduler
        self._region = region
        self._created: dict[str, datetime] = {}
        self._changed: dict[str, tuple[Any, Any]] = {}
        self._views: dict[str, DescribeAppResponse] = {}
        self.lists = 0
        self.describes = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One listing, and a describe of each followed job that changed.

        Args:
            app_ids: ``region:training_job_name`` of the followed jobs.

        Returns:
            The followed jobs the listing shows.
        """
        for cache in (self._created, self._changed, self._views):
            for gone in set(cache) - set(app_ids):
                del cache[gone]
        for app_id in sorted(set(app_ids) - set(self._created)):
            self._learn(app_id)  # once per job: its creation time bounds the listing
        if not self._created:
            return {}
        names = {a.partition(":")[2]: a for a in app_ids}  # a malformed id: never listed
        self.lists += 1
        listed = self._scheduler.summaries(self._region, min(self._created.values()) - SLACK)
        out: dict[str, DescribeAppResponse] = {}
        for summary in listed:
            found = names.get(str(summary.get("TrainingJobName")))
            if found is None:
                continue
            mark = (summary.get("TrainingJobStatus"), summary.get("LastModifiedTime"))
            if self._changed.get(found) != mark and not self._learn(found, mark):
                continue
            out[found] = self._views[found]
        return out

    def _learn(self, app_id: str, mark: tuple[Any, Any] | None = None) -> bool:
        """Describes one job into the cache; False when SageMaker does not know it."""
        self.describes += 1
        job = self._scheduler.training_job(app_id)
        if job is None:
            return False
        created = job.get("CreationTime")
        self._created[app_id] = (
            created if isinstance(created, datetime) else datetime.now(timezone.utc)
        )
        self._changed[app_id] = mark or (job.get("TrainingJobStatus"),
                                         job.get("LastModifiedTime"))  # fmt: skip
        self._views[app_id] = self._scheduler.describe_job(app_id, job)
        return True

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one job.

        Args:
            app_id: The job.

        Returns:
            Its description, or None when SageMaker does not know it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the job's region, for the scheduler's credentials and endpoint.

    Args:
        scheduler: An :class:`AwsSageMakerScheduler`.
        app_id: ``region:training_job_name``.

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    region = app_id.partition(":")[0]  # a malformed id is confirmed (and gone) by describe
    return view_target(
        scheduler, AwsSageMakerScheduler,
        lambda s: f"{s._profile or 'default'}@{s._endpoint_url or 'aws'}",
        lambda s: SageMakerReader(s, region), region=region,
    )  # fmt: skip
