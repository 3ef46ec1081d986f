"""Following every followed Slurm job with one ``squeue`` (and one ``sacct``) per interval.

Each read runs ``squeue --json --states=all --jobs=ID,ID,...`` once for every followed job
(over ``rest``: one ``GET .../jobs``),
then ``sacct --jobs=ID,...`` once for the jobs squeue no longer shows (finished longer than
``MinJobAge`` ago), through the scheduler's client (whatever transport it uses). A job
neither shows is confirmed by ``describe`` before anyone hears it is gone; a command that
fails or prints nothing is no news (the last state stands until a read answers).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.slurm.scheduler import SlurmScheduler
from tether.schedulers.slurm.status import SlurmApp, from_squeue
from tether.schedulers.watch.events import FollowTarget, view_target


class SlurmReader:
    """Reads the followed jobs of one cluster in batches (see the module docs).

    Args:
        scheduler: A scheduler of that cluster (its client runs the commands).
    """

    def __init__(self, scheduler: SlurmScheduler) -> None:
        self._scheduler = scheduler
        self.commands = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def _squeue(self, ids: list[str]) -> list[SlurmApp]:
        self.commands += 1
        return from_squeue(self._scheduler.client.squeue_jobs(ids))

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One ``squeue`` for all jobs, one ``sacct`` for those it does not show.

        Args:
            app_ids: The followed job ids.

        Returns:
            The jobs either command shows (and ``delete`` did not hide).
        """
        ids = sorted(i for i in app_ids if i.isdigit())
        if not ids:
            return {}
        found = {a.app_id: a for a in self._squeue(ids) if a.app_id in app_ids}
        missing = [i for i in ids if i not in found]
        if missing:
            self.commands += 1
            for app in self._scheduler._client.accounting(job_id=",".join(missing)):
                if app.app_id in app_ids and app.app_id not in found:
                    found[app.app_id] = app
        return {
            app_id: self._scheduler.describe_app(app)
            for app_id, app in found.items()
            if not self._scheduler._deleted(app)
        }

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one job.

        Args:
            app_id: The job id.

        Returns:
            Its description, or None when Slurm does not know it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the scheduler's cluster (its ``slurm.conf``).

    Args:
        scheduler: A :class:`SlurmScheduler`.
        app_id: The job (every job of the cluster shares the view).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    return view_target(scheduler, SlurmScheduler, lambda s: s.client.cluster_key, SlurmReader)
