"""Following every followed Google Cloud Batch job of a project and location with one list.

Each read asks ``ListJobs`` once (paged) for tether's jobs of the view's project and location
(filtered by tether's label) and picks the followed ones: N jobs cost one listing per
interval, not N ``GetJob`` calls. A job the listing does not show is confirmed by
``describe`` (one ``GetJob``) before anyone hears it is gone; a failed call is no news.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.gcp_batch.render import app_id_of
from tether.schedulers.gcp_batch.scheduler import GcpBatchScheduler
from tether.schedulers.watch.events import FollowTarget, view_target


class GcpBatchReader:
    """Reads the followed jobs of one project and location (see the module docs).

    Args:
        scheduler: The scheduler (its client).
        project: The view's project.
        location: The view's location.
    """

    def __init__(self, scheduler: GcpBatchScheduler, project: str, location: str) -> None:
        self._scheduler = scheduler
        self._project = project
        self._location = location
        self.lists = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One listing of tether's jobs there.

        Args:
            app_ids: ``project:location:job_id`` of the followed jobs.

        Returns:
            The followed jobs the listing shows.
        """
        if not app_ids or not self._project:
            return {}
        self.lists += 1
        out: dict[str, DescribeAppResponse] = {}
        for job in self._scheduler.jobs(self._project, self._location):
            app_id = app_id_of(str(job.get("name", "")))
            if app_id in app_ids:
                out[app_id] = self._scheduler.describe_job(app_id, job)
        return out

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one job (one ``GetJob``).

        Args:
            app_id: The job.

        Returns:
            Its description, or None when Batch does not know it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the job's project and location, for the scheduler's client.

    Args:
        scheduler: A :class:`GcpBatchScheduler`.
        app_id: ``project:location:job_id``.

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    parts = app_id.split(":")  # a malformed id is never listed: describe confirms it gone
    project, location = (parts[0], parts[1]) if len(parts) == 3 else ("", "")
    return view_target(
        scheduler, GcpBatchScheduler,
        lambda s: f"client@{id(s.client()):x}",  # one client: one set of credentials
        lambda s: GcpBatchReader(s, project, location), project, location,
    )  # fmt: skip
