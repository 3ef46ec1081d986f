"""``report()``: a job tells its caller and orchestrator how far it is, while it runs.

Inside a job launched by tether::

    from tether.runtime import report

    for step in range(total):
        loss = train_step()
        report(step=step + 1, total=total, loss=loss, epoch=epoch)

Each report replaces the previous one in the app's outputs folder (the channel of job
outputs, ``$TETHER_OUTPUTS_URL``); ``Runner.progress(handle)``, ``tether status`` and the
Airflow, Prefect and KFP adapters show the latest; the job's trackers (``$TETHER_TRACKERS``)
record each written report (MLflow: each metric at the report's step). In a KFP native step
compiled with ``KubernetesOptions(metrics=True)`` (KFP starts that job, not tether) each
written report goes into the step's ``Metrics`` artifact
(:mod:`tether.runtime.kfp_metrics`). Calling it every step is cheap: at most one
report per ``$TETHER_PROGRESS_INTERVAL`` seconds (default 1) is written; the others are kept
and the latest is written by the next report that is due, by ``flush=True``, or when the
process exits. The first report and the one that reaches ``total`` are always written. Only
rank 0 of a distributed job writes (the other ranks' calls return at once). Outside a tether
job (no ``$TETHER_OUTPUTS_URL``) and such a KFP step ``report`` does nothing.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from tether.runtime.distributed import rank
from tether.runtime.kfp_metrics import KfpMetrics, KfpMetricsSink
from tether.tracker.env import ENV_JOB_ID
from tether.tracker.outputs import ENV_OUTPUTS_URL
from tether.tracker.progress import Progress, check_report, write_progress

log = logging.getLogger(__name__)

ENV_PROGRESS_INTERVAL = "TETHER_PROGRESS_INTERVAL"
"""Least seconds between two written reports (default 1)."""

DEFAULT_INTERVAL = 1.0


@dataclass(frozen=True)
class _Targets:
    """Where this process's reports go: the app's outputs URL and/or a KFP step's artifact."""

    url: str | None
    kfp: KfpMetrics | None


class _Reporter:
    """The reports of this process: rate limit, ETA and the one report waiting to be written."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.last_write = float("-inf")
        self.pending: tuple[_Targets, Progress] | None = None
        self.first: tuple[float, int] | None = None  # (time, step) of the first step reported
        self.registered = False
        self.track_failed = False
        self.kfp = KfpMetricsSink()

    def eta(self, now: float, step: int | None, total: int | None) -> float | None:
        if step is None or not total:
            return None
        if self.first is None:
            self.first = (now, step)
            return None
        t0, s0 = self.first
        if step <= s0 or now <= t0:
            return None
        return max(total - step, 0) * (now - t0) / (step - s0)

    def add(self, targets: _Targets, progress: Progress, force: bool) -> bool:
        interval = _interval()
        with self.lock:
            due = force or self.seq == 1 or progress.time - self.last_write >= interval
            if not due:
                self.pending = (targets, progress)
                if not self.registered:
                    atexit.register(self.flush)
                    self.registered = True
                return False
            self.pending = None
            self.last_write = progress.time
        self.write(targets, progress)
        return True

    def write(self, targets: _Targets, progress: Progress) -> None:
        if targets.url:
            write_progress(targets.url, progress)
        if targets.kfp is not None:
            self.kfp.write(targets.kfp, progress)
        self.track(progress)

    def flush(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, None
        if pending is not None:
            try:
                self.write(*pending)
            except Exception as e:  # at exit: never turn a finished job into a failure
                log.warning("cannot write the last progress report: %s", e)

    def track(self, progress: Progress) -> None:
        """Records a written report in the job's trackers; a tracker that fails is logged
        (once) and never fails the job."""
        if not os.environ.get(ENV_JOB_ID):
            return
        try:
            from tether.tracker.app_run import AppRun

            AppRun.run_from_env().add_progress(progress.to_dict())
        except Exception as e:
            if not self.track_failed:
                log.warning("cannot record the progress report in the trackers: %s", e)
            self.track_failed = True


_reporter = _Reporter()


def _interval() -> float:
    raw = os.environ.get(ENV_PROGRESS_INTERVAL, "").strip()
    try:
        return max(float(raw), 0.0) if raw else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL


def report(
    step: int | None = None,
    total: int | None = None,
    *,
    eta_s: float | None = None,
    flush: bool = False,
    **metrics: Any,
) -> bool:
    """Reports the job's progress and metrics (the latest report replaces the one before).

    Args:
        step: Steps done so far.
        total: Steps in all, when known.
        eta_s: Seconds left; by default estimated from the rate of steps reported so far.
        flush: Write this report now, whatever the rate limit.
        **metrics: Metric name to number (``loss=0.33``, ``epoch=2``).

    Returns:
        True when this report was written now; False when it waits for the next one that is
        due (or the process's exit), or when nothing is written (not rank 0, neither a tether
        job nor a KFP step with metrics).

    Raises:
        SpecTypeError: For a step, total or metric that is not a number.
        SpecError: For a negative step or total, or a metric that is not finite.
    """
    values = check_report(step, total, metrics)
    targets = _Targets(os.environ.get(ENV_OUTPUTS_URL) or None, _reporter.kfp.target())
    if (targets.url is None and targets.kfp is None) or rank() != 0:
        return False
    now = time.time()
    with _reporter.lock:
        _reporter.seq += 1
        seq = _reporter.seq
        if eta_s is None:
            eta_s = _reporter.eta(now, step, total)
    done = step is not None and total is not None and step >= total
    progress = Progress(step=step, total=total, metrics=values, eta_s=eta_s, time=now, seq=seq)
    return _reporter.add(targets, progress, force=flush or done)
