"""Following every followed LSF app with one ``bjobs`` per interval.

Each read runs ``bjobs -a -json`` once (the user's jobs, finished ones included for LSF's
``CLEAN_PERIOD``) and groups the jobs by the app id in their names, as ``list`` does: N
followed apps cost one command per interval, not one ``bjobs -J`` each. An app the answer
does not show is confirmed by ``describe`` before anyone hears it is gone; a ``bjobs`` that
fails or prints no JSON is no news (the last state stands until a read answers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.lsf.scheduler import LsfScheduler
from tether.schedulers.watch.events import FollowTarget, view_target


class LsfReader:
    """Reads the followed apps of one LSF cluster with one ``bjobs`` (see the module docs).

    Args:
        scheduler: The scheduler (it runs LSF's commands).
    """

    def __init__(self, scheduler: LsfScheduler) -> None:
        self._scheduler = scheduler
        self.commands = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One ``bjobs`` for every followed app.

        Args:
            app_ids: The followed app ids.

        Returns:
            The apps it shows a job of.
        """
        if not app_ids:
            return {}
        self.commands += 1
        found = self._scheduler.apps_jobs(app_ids)
        return {a: self._scheduler.describe_jobs(a, jobs) for a, jobs in found.items()}

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one app.

        Args:
            app_id: The app id.

        Returns:
            Its description, or None when LSF knows no job of it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the cluster this process's LSF commands reach (``$LSF_ENVDIR``).

    Args:
        scheduler: An :class:`LsfScheduler`.
        app_id: The app (every app of the cluster shares the view).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    return view_target(
        scheduler, LsfScheduler, lambda s: os.environ.get("LSF_ENVDIR") or "default", LsfReader
    )
