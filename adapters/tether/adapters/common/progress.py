"""Live progress: hands each new report of a followed job to the orchestrator's sink.

A job reports through :func:`tether.runtime.report`; :class:`ProgressWatch` reads the latest
report (``Runner.progress``) at most every ``interval`` seconds while a session follows the
job and calls its :data:`ProgressSink` with each report it has not seen: the Airflow task log,
a Prefect progress artifact, the KFP step's log and metrics. Reading a report changes
nothing; a report that cannot be read is skipped (the job's result never depends on it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tether.runner import Runner
from tether.tracker.progress import Progress

log = logging.getLogger(__name__)

ProgressSink = Callable[[Progress], None]
"""Receives each new progress report of a job."""

DEFAULT_INTERVAL = 2.0
"""Least seconds between two reads of a job's report."""


class ProgressWatch:
    """Reads a job's latest report now and then; hands each new one to ``sink``.

    Args:
        sink: Receives each report not seen before (its exceptions are logged, not raised).
        interval: Least seconds between two reads.
    """

    def __init__(self, sink: ProgressSink, interval: float = DEFAULT_INTERVAL) -> None:
        self.sink = sink
        self.interval = interval
        self.latest: Progress | None = None
        self._next_read = 0.0

    def due(self) -> bool:
        """Whether the next read is due."""
        return time.monotonic() >= self._next_read

    def read(self, runner: Runner, app_handle: str) -> Progress | None:
        """Reads the job's report (whatever the interval) and hands it on when it is new.

        Args:
            runner: Reads the report.
            app_handle: The job.

        Returns:
            The new report, or None when there is none or it was seen before.
        """
        self._next_read = time.monotonic() + self.interval
        try:
            progress = runner.progress(app_handle)
        except Exception as e:
            log.debug("cannot read the progress of %s: %s", app_handle, e)
            return None
        return self.offer(progress)

    def poll(self, runner: Runner, app_handle: str) -> Progress | None:
        """:meth:`read` when it is due, else nothing."""
        return self.read(runner, app_handle) if self.due() else None

    def offer(self, progress: Progress | None) -> Progress | None:
        """Hands ``progress`` to the sink unless it is the report seen last.

        Returns:
            ``progress`` when it was new, else None.
        """
        if progress is None or progress == self.latest:
            return None
        self.latest = progress
        try:
            self.sink(progress)
        except Exception as e:
            log.warning("cannot show a progress report: %s", e)
        return progress
