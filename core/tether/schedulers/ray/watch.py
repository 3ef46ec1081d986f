"""Following every followed Ray job of a cluster with one jobs listing per interval.

Each read asks the Jobs API for its job list once (``list_jobs``) and keeps the followed
jobs; a job the listing does not show is confirmed with ``get_job_info`` (``describe``)
before anyone hears it is gone; a listing that fails is no news.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.ray.scheduler import RayScheduler
from tether.schedulers.watch.events import FollowTarget, view_target


class RayReader:
    """Reads the followed jobs of one Ray cluster (see the module docs).

    Args:
        scheduler: A scheduler of that cluster (its Jobs API client).
    """

    def __init__(self, scheduler: RayScheduler) -> None:
        self._scheduler = scheduler
        self.listings = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One jobs listing.

        Args:
            app_ids: The followed submission ids.

        Returns:
            The followed jobs the listing shows.
        """
        self.listings += 1
        out: dict[str, DescribeAppResponse] = {}
        for info in self._scheduler.client().list_jobs():
            sid = info.submission_id
            if sid in app_ids:
                out[sid] = self._scheduler.describe_info(sid, info)
        return out

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one job.

        Args:
            app_id: The submission id.

        Returns:
            Its description, or None when the cluster does not know it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the scheduler's Ray cluster (its address).

    Args:
        scheduler: A :class:`RayScheduler`.
        app_id: The job (every job of the cluster shares the view).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    return view_target(scheduler, RayScheduler, lambda s: s.address, RayReader)
