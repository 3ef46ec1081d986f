"""The generic reader: one ``describe`` per followed job per interval.

For backends that declare no cheaper way to follow many jobs (``FollowMode.DESCRIBE_EACH``).
It still shares one view per scheduler instance, so any number of subscribers of a job cost
one read of it per interval, not one each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.watch.events import FollowTarget, WatchKey

log: logging.Logger = logging.getLogger(__name__)


class DescribeReader:
    """Reads each followed job with the scheduler's ``describe``.

    Args:
        scheduler: The scheduler.
    """

    def __init__(self, scheduler: Scheduler[Any]) -> None:
        self._scheduler = scheduler

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start.

        Args:
            wake: Unused.
        """

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """Describes every job; a job whose read fails is left out (the driver retries).

        Args:
            app_ids: The followed jobs.

        Returns:
            The jobs that exist.

        Raises:
            Exception: The last error, when every job's read failed (the backend, not a
                job, is failing: the driver counts it against its failure policy).
        """
        out: dict[str, DescribeAppResponse] = {}
        errors: list[Exception] = []
        for app_id in sorted(app_ids):
            try:
                resp = self._scheduler.describe(app_id)
            except Exception as e:  # left out: confirmed (or retried) by the driver
                log.debug("describe %s failed: %s", app_id, e)
                errors.append(e)
                continue
            if resp is not None:
                out[app_id] = resp
        if errors and len(errors) == len(app_ids):
            raise errors[-1]
        return out

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """Describes one job.

        Args:
            app_id: The job.

        Returns:
            Its description, or None when it does not exist.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str, interval: float) -> FollowTarget:
    """One view per scheduler instance (its connection is its own).

    Args:
        scheduler: The scheduler.
        app_id: The job (unused: every job of the instance shares the view).
        interval: Seconds between reads.

    Returns:
        The target.
    """
    key = WatchKey(scheduler.backend, f"{scheduler.session_name}@{id(scheduler):x}")
    return FollowTarget(key, lambda: DescribeReader(scheduler), interval)
