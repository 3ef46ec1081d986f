"""What every orchestrator adapter shares: one mechanism each, used by Airflow, Prefect, KFP.

* **Job identity**: :func:`job_key` turns the orchestrator's own ids (DAG run + task + map
  index, flow run + task run, KFP run + task) into a stable key; :class:`ComponentJob` passes
  it to the Runner, which re-attaches to a job already launched with that key instead of
  submitting a duplicate, and resubmits only after a failed attempt.
* **Log fan-in**: :meth:`ComponentJob.stream_logs` feeds every replica's lines, prefixed
  ``role/replica``, to the orchestrator's logger while the job runs.
* **Outputs**: :class:`JobResult` carries the job's published outputs and final status.
* **Cancellation**: :meth:`ComponentJob.cancel` is what each orchestrator's stop signal calls.

This module holds those. What else the adapters share lives in two sibling modules and is
importable from here too: finding and materializing components (:func:`resolve_component`,
:func:`component_ref`, :func:`component_params`, :func:`materialize`) in
:mod:`tether.adapters.components`, and what is shown of an app with its secrets masked
(:func:`app_secrets`, :func:`mask_app_text`, :func:`describe_app`, and :func:`render_dryrun`,
the scheduler layer of a dry-run, to which each adapter adds its own) in
:mod:`tether.adapters.describe`.

Only the public API of ``tether.runner``, ``tether.specs`` and ``tether.components`` is used.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.adapters.components import component_params as component_params
from tether.adapters.components import component_ref as component_ref
from tether.adapters.components import materialize as materialize
from tether.adapters.components import resolve_component as resolve_component
from tether.adapters.describe import app_secrets as app_secrets
from tether.adapters.describe import describe_app as describe_app
from tether.adapters.describe import mask_app_text as mask_app_text
from tether.adapters.describe import render_dryrun as render_dryrun
from tether.errors import TetherError
from tether.runner import Runner, fan_in, get_runner
from tether.specs import AppDef, AppState, AppStatus, CfgVal

log = logging.getLogger(__name__)


class JobFailedError(TetherError, RuntimeError):
    """The job finished without succeeding; the message is the job's own error."""

    def __init__(self, result: JobResult) -> None:
        detail = result.msg or "no message from the scheduler"
        super().__init__(
            f"tether job {result.app_handle} finished {result.state.name}: {detail}"
        )
        self.result = result

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the result, so it survives pickling (orchestrators persist exceptions)
        return (type(self), (self.result,))


@dataclass
class JobResult:
    """The outcome of a job, in a form every orchestrator can store.

    Attributes:
        app_handle: The job's handle.
        state: Final state.
        msg: The scheduler's message (the failure reason).
        ui_url: Link to the job's UI, if any.
        outputs: What the job published through ``AppRun.add_output``.
        num_restarts: Restarts the scheduler made.
        reattached: Whether this run re-attached to a job launched by an earlier attempt.
    """

    app_handle: str
    state: AppState
    msg: str = ""
    ui_url: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    num_restarts: int = 0
    reattached: bool = False

    @property
    def succeeded(self) -> bool:
        """Whether the job SUCCEEDED."""
        return self.state == AppState.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable summary (state as its name)."""
        return {
            "app_handle": self.app_handle,
            "state": self.state.name,
            "msg": self.msg,
            "ui_url": self.ui_url,
            "outputs": self.outputs,
            "num_restarts": self.num_restarts,
            "reattached": self.reattached,
        }


_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def job_key(orchestrator: str, *parts: object) -> str:
    """A stable job identity from an orchestrator's ids.

    The key is short and label-safe (Kubernetes label values, AWS tags, Slurm comments): the
    orchestrator's name plus a hash of the parts.

    Args:
        orchestrator: ``airflow``, ``prefect``, ``kfp``...
        *parts: The ids that identify one logical task execution across retries (e.g.
            dag_id, run_id, task_id, map_index).

    Returns:
        The key, e.g. ``airflow-3f2a...``.
    """
    text = "\x1f".join(str(p) for p in parts)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return f"{_KEY_SAFE.sub('-', orchestrator)[:20]}-{digest}"


LineSink = Callable[[str], None]


class ComponentJob:
    """One logical job of an orchestrator task: submit-or-attach, stream logs, wait, cancel.

    Args:
        app: The materialized AppDef.
        scheduler: The scheduler to run on.
        cfg: Run options.
        key: Stable job identity (see :func:`job_key`); None disables re-attaching.
        parent_run_id: Tracking parent (the DAG run, the flow run...).
        runner: Runner to use (default: a new one, closed by :meth:`close`).
    """

    def __init__(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        key: str | None = None,
        parent_run_id: str | None = None,
        runner: Runner | None = None,
    ) -> None:
        self.app = app
        self.scheduler = scheduler
        self.cfg = dict(cfg or {})
        self.key = key
        self.parent_run_id = parent_run_id
        self._own_runner = runner is None
        self.runner = runner or get_runner()
        self.app_handle: str | None = None
        self.reattached = False
        self._cancelled = threading.Event()
        self.stop_reason: str | None = None

    @classmethod
    def attach(cls, app_handle: str, runner: Runner | None = None) -> ComponentJob:
        """A job for an app launched earlier (e.g. by a task that deferred, or another process).

        Args:
            app_handle: The app's handle.
            runner: Runner to use (default: a new one, closed by :meth:`close`).

        Returns:
            The job, already "submitted" (``app`` is what the scheduler can rebuild of it).
        """
        from tether.specs import parse_app_handle

        r = runner or get_runner()
        parsed = parse_app_handle(app_handle)
        app = r.describe(app_handle) or AppDef(name=parsed.app_id, roles=[])
        job = cls(app, parsed.scheduler_backend, key=None, runner=r)
        job._own_runner = runner is None
        job.app_handle = app_handle
        job.reattached = True
        return job

    # ---- submit ------------------------------------------------------------------------
    def submit(self) -> str:
        """Submits the job, or re-attaches to the one an earlier attempt launched.

        Returns:
            The app handle.
        """
        outcome = self.runner.run_or_attach(
            self.app, self.scheduler, self.cfg, parent_run_id=self.parent_run_id, job_key=self.key
        )
        self.app_handle, self.reattached = outcome.app_handle, outcome.reattached
        return outcome.app_handle

    def launch(self) -> str:
        """Submits a new job with this job's key, whatever jobs the key already has.

        For callers that decide themselves when to re-attach (see
        :mod:`tether.adapters.airflow.attempts`).

        Returns:
            The app handle.
        """
        info = self.runner.dryrun(
            self.app, self.scheduler, self.cfg, parent_run_id=self.parent_run_id, job_key=self.key
        )
        self.app_handle, self.reattached = self.runner.schedule(info), False
        return self.app_handle

    def adopt(self, app_handle: str) -> str:
        """Follows a job launched earlier instead of submitting one.

        Args:
            app_handle: The earlier job.

        Returns:
            The app handle.
        """
        self.app_handle, self.reattached = app_handle, True
        return app_handle

    def _handle(self) -> str:
        if self.app_handle is None:
            raise RuntimeError("the job was not submitted: call submit() first")
        return self.app_handle

    # ---- observe -----------------------------------------------------------------------
    def stream_logs(
        self, sink: LineSink, follow: bool = True, skip: Mapping[str, int] | None = None
    ) -> None:
        """Feeds every replica's log lines (``role/replica line``) to ``sink``.

        Args:
            sink: Receives one formatted line at a time (e.g. ``logger.info``).
            follow: Follow the logs until the job ends; False returns what is there now
                (e.g. the whole log of a finished job).
            skip: A cursor: how many lines of each replica (by ``role/replica``, the prefix
                of every formatted line) an earlier attempt already delivered; those are
                read but not fed to ``sink``.
        """
        seen: dict[str, int] = {}
        for line in fan_in(self.runner, self._handle(), should_tail=follow):
            if skip:
                replica = f"{line.role}/{line.replica}"
                n = seen.get(replica, 0)
                seen[replica] = n + 1
                if n < skip.get(replica, 0):
                    continue
            sink(line.format())

    def status(self) -> AppStatus | None:
        """The job's current status."""
        return self.runner.status(self._handle())

    def wait(self, wait_interval: float = 5.0, timeout: float | None = None) -> JobResult:
        """Waits for the job to finish and collects its result.

        Args:
            wait_interval: Poll interval for schedulers that need polling.
            timeout: Stop waiting after this many seconds (the job keeps running).

        Returns:
            The result (whatever the final state).
        """
        handle = self._handle()
        status = self.runner.wait(handle, wait_interval=wait_interval, timeout=timeout)
        return self.result(status)

    def result(self, status: AppStatus | None = None) -> JobResult:
        """Builds the result from a status (fetching it when not given).

        Args:
            status: The status.

        Returns:
            The result; outputs are read only for finished jobs.
        """
        handle = self._handle()
        status = status or self.runner.status(handle)
        if status is None:
            return JobResult(handle, AppState.UNKNOWN, msg="the scheduler no longer knows the job",
                             reattached=self.reattached)
        outputs: dict[str, Any] = {}
        if status.is_terminal():
            try:
                outputs = self.runner.outputs(handle)
            except Exception as e:
                log.warning("cannot read the outputs of %s: %s", handle, e)
        return JobResult(
            app_handle=handle, state=status.state, msg=mask_app_text(self.app, status.msg),
            ui_url=status.ui_url,
            outputs=outputs, num_restarts=max(status.num_restarts, 0), reattached=self.reattached,
        )

    def run(
        self,
        sink: LineSink | None = None,
        wait_interval: float = 5.0,
        raise_on_failure: bool = True,
    ) -> JobResult:
        """Submit-or-attach, stream logs into ``sink`` while it runs, wait, collect the result.

        Args:
            sink: Receives log lines (no streaming when None).
            wait_interval: Poll interval.
            raise_on_failure: Raise :class:`JobFailedError` unless the job SUCCEEDED.

        Returns:
            The result.

        Raises:
            JobFailedError: When the job did not succeed and ``raise_on_failure``.
        """
        self.submit()
        if sink is not None:
            self.stream_logs(sink)
        result = self.wait(wait_interval)
        if raise_on_failure and not result.succeeded:
            raise JobFailedError(result)
        return result

    def follow(
        self,
        sink: LineSink | None = None,
        poll_interval: float = 0.5,
        should_stop: Callable[[], str | None] | None = None,
        drain_timeout: float = 10.0,
        skip: Mapping[str, int] | None = None,
    ) -> JobResult:
        """Streams logs into ``sink`` on a helper thread and waits in short slices.

        Unlike :meth:`run`, the calling thread never blocks for longer than ``poll_interval``
        in one call, so an orchestrator's interruption reaches it promptly: an exception
        injected into the thread (a task timeout), or raised by a signal handler in the main
        thread. The caller's ``except``/``finally`` then calls :meth:`cancel_and_wait`.

        Args:
            sink: Receives log lines (no streaming when None). Its exceptions are raised here
                (the job keeps running, so a retry can re-attach to it).
            poll_interval: Longest single wait, in seconds.
            should_stop: Polled every slice; when it returns a reason, the job is cancelled
                and followed to its final state, and the reason is kept in
                :attr:`stop_reason`.
            drain_timeout: After the job finished, how long to wait for more log lines: the
                wait ends when the log streams end, or when no line arrived for this long
                (a chatty job's backlog is delivered in full, however long it takes).
            skip: Log cursor of an earlier attempt (see :meth:`stream_logs`).

        Returns:
            The result (whatever the final state).
        """
        self._handle()
        self.status()  # creates the scheduler here, not concurrently in the log thread
        errors: list[BaseException] = []
        pump: threading.Thread | None = None
        delivered = [0]
        if sink is not None:
            ctx = contextvars.copy_context()
            target = sink

            def counting(text: str) -> None:
                target(text)
                delivered[0] += 1

            def _pump() -> None:
                try:
                    self.stream_logs(counting, skip=skip)
                except BaseException as e:
                    errors.append(e)

            pump = threading.Thread(
                target=ctx.run, args=(_pump,), daemon=True, name=f"tether-logs-{self.app_handle}"
            )
            pump.start()
        while True:
            if errors:
                raise errors[0]
            if should_stop is not None and self.stop_reason is None:
                reason = should_stop()
                if reason:
                    self.stop_reason = reason
                    log.info("stopping %s: %s", self.app_handle, reason)
                    self.cancel()
            result = self.wait(wait_interval=poll_interval, timeout=poll_interval)
            if result.state.is_terminal() or result.state == AppState.UNKNOWN:
                break
        if pump is not None:
            last, deadline = delivered[0], time.monotonic() + drain_timeout
            while pump.is_alive() and time.monotonic() < deadline:
                pump.join(min(poll_interval, max(deadline - time.monotonic(), 0.0)))
                if delivered[0] != last:  # still delivering: keep waiting
                    last, deadline = delivered[0], time.monotonic() + drain_timeout
            if pump.is_alive():
                log.warning("the logs of %s are still streaming %.0f s after it finished; "
                            "not waiting for the rest", self.app_handle, drain_timeout)
            if errors:
                raise errors[0]
        return result

    # ---- stop --------------------------------------------------------------------------
    def cancel(self) -> None:
        """Cancels the job (idempotent; a no-op before submission)."""
        self._cancelled.set()
        if self.app_handle is not None:
            log.info("cancelling %s", self.app_handle)
            self.runner.cancel(self.app_handle)

    def cancel_and_wait(
        self, timeout: float = 30.0, poll_interval: float = 0.5
    ) -> JobResult | None:
        """Cancels the job and waits until it has stopped: what a stop signal should call.

        A submission interrupted before its handle came back is covered too: the job is then
        looked up by its key.

        Args:
            timeout: Longest wait for the job to reach a final state, in seconds.
            poll_interval: Poll interval.

        Returns:
            The result after cancelling, or None when there is no job to cancel.
        """
        if self.app_handle is None and self.key:
            found = self.runner.find_job(self.scheduler, self.key)
            if found is not None and not found.status.is_terminal():
                self.app_handle = found.app_handle
        if self.app_handle is None:
            self._cancelled.set()
            return None
        self.cancel()
        return self.wait(wait_interval=poll_interval, timeout=timeout)

    def close(self) -> None:
        """Closes the runner if this job created it."""
        if self._own_runner:
            self.runner.close()
