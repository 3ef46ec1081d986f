"""The job session: one logical job of an orchestrator task, from submission to outputs.

Every orchestrator adapter (the Airflow operator and trigger, the Prefect task, the KFP
launcher) holds one :class:`JobSession` and asks it, never the Runner, to:

* **submit or attach** (:meth:`JobSession.submit`): find the job an earlier attempt launched
  with the same job key and apply the one rule of :mod:`tether.runner.reattach` to it; an
  app with a recovery policy is one logical job (``Runner.run_or_attach`` starts or adopts
  it by the same rule), whose attempts the follower recovers, so the orchestrator never
  retries an infrastructure failure itself;
* **follow** the job (:meth:`JobSession.follow`) through its :class:`Follower` (the Runner by
  default; a shared watch plugs in there), while a :class:`~.pump.LogPump` delivers its log
  lines past the caller's :class:`~.cursor.LogCursor`;
* **cancel** it (:meth:`JobSession.cancel_and_wait`), also while its submission was in
  flight (then it is found by its key);
* collect its **result** and outputs (:meth:`JobSession.result`);
* hand each new **progress report** of the job (:func:`tether.runtime.report`) to the
  caller's :data:`~.progress.ProgressSink` while it follows the job.

The session holds its Runner; one it made itself it closes in :meth:`JobSession.close` (or
at the end of a ``with`` block).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from tether.adapters.common.cursor import LogCursor
from tether.adapters.common.follow import Follower, RunnerFollower
from tether.adapters.common.progress import ProgressSink, ProgressWatch
from tether.adapters.common.pump import LineSink, LogPump
from tether.adapters.common.result import JobFailedError, JobResult
from tether.adapters.describe import mask_app_text
from tether.runner import Runner, get_runner
from tether.runner.reattach import Action, Decision, EarlierJob, Reattach, decide
from tether.specs import AppDef, AppState, AppStatus, CfgVal
from tether.tracker.progress import Progress

log = logging.getLogger(__name__)


class JobSession:
    """One logical job of an orchestrator task: submit-or-attach, follow, cancel, result.

    Args:
        app: The materialized AppDef.
        scheduler: The scheduler to run on, or the schedulers to try in order (a failover
            list: the job runs as one logical job, see ``docs/recovery.md``).
        cfg: Run options.
        key: Stable job identity (see :func:`~tether.adapters.common.job_key`); None
            disables re-attaching.
        parent_run_id: Tracking parent (the DAG run, the flow run...).
        runner: Runner to use (default: a new one, closed by :meth:`close`).
        follower: Where the job's status comes from (default: the runner's).
    """

    def __init__(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        key: str | None = None,
        parent_run_id: str | None = None,
        runner: Runner | None = None,
        follower: Follower | None = None,
    ) -> None:
        self.app = app
        self.schedulers = [scheduler] if isinstance(scheduler, str) else list(scheduler)
        self.scheduler = self.schedulers[0]
        self.cfg = dict(cfg or {})
        self.key = key
        self.parent_run_id = parent_run_id
        self._own_runner = runner is None
        self.runner = runner or get_runner()
        self.follower: Follower = follower or RunnerFollower(self.runner)
        self.app_handle: str | None = None
        self.reattached = False
        self._cancelled = threading.Event()
        self.stop_reason: str | None = None
        self.final_status: AppStatus | None = None
        # whether the runner built the scheduler of app_handle (a launch here did)
        self._scheduler_built = False

    @classmethod
    def attach(cls, app_handle: str, runner: Runner | None = None) -> JobSession:
        """A session for a job launched earlier (by a task that deferred, another process).

        Args:
            app_handle: The job's handle.
            runner: Runner to use (default: a new one, closed by :meth:`close`).

        Returns:
            The session, already attached (``app`` is what the scheduler can rebuild of it).
        """
        from tether.specs import parse_app_handle

        r = runner or get_runner()
        parsed = parse_app_handle(app_handle)
        app = r.describe(app_handle) or AppDef(name=parsed.app_id, roles=[])
        session = cls(app, parsed.scheduler_backend, key=None, runner=r)
        session._own_runner = runner is None
        session.adopt(app_handle)
        return session

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- submit or attach ------------------------------------------------------------------
    def earlier_job(self) -> EarlierJob | None:
        """The newest job launched with this session's key, if any (no record of outcomes);
        for an app with a recovery policy, its logical job."""
        if not self.key:
            return None
        found = self.runner.find_job(self.scheduler, self.key, self.cfg)
        return None if found is None else EarlierJob(found.app_handle, found.status)

    def submit(
        self,
        earlier: EarlierJob | None = None,
        mode: Reattach = Reattach.AUTO,
        before_launch: Callable[[], None] | None = None,
        *,
        look_up: bool = True,
    ) -> Decision:
        """Attaches to the earlier job or launches a new one, by the one re-attach rule.

        Args:
            earlier: The earlier job as the caller knows it.
            mode: How to apply the rule.
            before_launch: Called right before a new job is submitted (to record the intent).
            look_up: Without ``earlier``, find the newest job with this session's key (a
                caller that keeps its own record of jobs, Airflow's ledger, passes False).

        Returns:
            The decision taken; :attr:`app_handle` and :attr:`reattached` are set.
        """
        if earlier is None and look_up:
            earlier = self.earlier_job()
        decision = decide(earlier, mode)
        if decision.cancel_previous:
            log.info("cancelling tether job %s of an earlier attempt (%s)",
                     decision.cancel_previous, decision.reason)
            self.runner.cancel(decision.cancel_previous)
        if decision.action is Action.ATTACH and earlier is not None and earlier.app_handle:
            log.info("re-attaching to %s (%s)", earlier.app_handle, decision.reason)
            self.adopt(earlier.app_handle)
        else:
            if before_launch is not None:
                before_launch()
            self.launch()
        return decision

    @property
    def recovers(self) -> bool:
        """Whether the job is a logical job over attempts: its app has a recovery policy, or
        it names several schedulers to try."""
        return self.app.recovery is not None or len(self.schedulers) > 1

    def launch(self) -> str:
        """Submits a new job with this session's key, whatever jobs the key already has (a
        logical job with that key is adopted, unless it ended without success).

        Returns:
            The app handle.
        """
        if self.recovers:
            where = self.schedulers if len(self.schedulers) > 1 else self.scheduler
            outcome = self.runner.run_or_attach(self.app, where, self.cfg,
                                                parent_run_id=self.parent_run_id,
                                                job_key=self.key)  # fmt: skip
            self.app_handle, self.reattached = outcome.app_handle, outcome.reattached
            self._scheduler_built = False  # a logical job's handle: follow() checks it
            return self.app_handle
        info = self.runner.dryrun(
            self.app, self.scheduler, self.cfg, parent_run_id=self.parent_run_id, job_key=self.key
        )
        self.app_handle, self.reattached = self.runner.schedule(info), False
        self._scheduler_built = True
        return self.app_handle

    def adopt(self, app_handle: str) -> str:
        """Follows a job launched earlier instead of submitting one.

        Args:
            app_handle: The earlier job.

        Returns:
            The app handle.
        """
        self.app_handle, self.reattached = app_handle, True
        self._scheduler_built = False
        return app_handle

    def _handle(self) -> str:
        if self.app_handle is None:
            raise RuntimeError("the job was not submitted: call submit() first")
        return self.app_handle

    # ---- observe ---------------------------------------------------------------------------
    def status(self) -> AppStatus | None:
        """The job's current status."""
        return self.follower.status(self._handle())

    def wait(self, wait_interval: float = 5.0, timeout: float | None = None) -> JobResult:
        """Waits for the job to finish and collects its result.

        Args:
            wait_interval: Poll interval for schedulers that need polling.
            timeout: Stop waiting after this many seconds (the job keeps running).

        Returns:
            The result (whatever the final state).
        """
        return self.result(self.follower.wait(self._handle(), wait_interval, timeout))

    def stream_logs(self, sink: LineSink, follow: bool = True,
                    cursor: LogCursor | None = None) -> None:
        """Feeds every replica's lines past ``cursor`` (``role/replica line``) to ``sink``.

        Args:
            sink: Receives one formatted line at a time (e.g. ``logger.info``).
            follow: Follow the logs until the job ends; False returns what is there now.
            cursor: Lines an earlier follower delivered; moved past each line delivered.
        """
        cursor = cursor if cursor is not None else LogCursor()
        for line in cursor.new_lines(self.runner, self._handle(), follow):
            sink(line)

    def result(self, status: AppStatus | None = None) -> JobResult:
        """Builds the result from a status (fetching it when not given).

        Args:
            status: The status.

        Returns:
            The result; outputs are read only for finished jobs.
        """
        handle = self._handle()
        status = status or self.status()
        if status is None:
            return JobResult(handle, AppState.UNKNOWN, msg="the scheduler no longer knows the job",
                             reattached=self.reattached)
        outputs: dict[str, Any] = {}
        progress = None
        if status.is_terminal():
            try:
                outputs = self.runner.outputs(handle)
            except Exception as e:
                log.warning("cannot read the outputs of %s: %s", handle, e)
            try:
                progress = self.runner.progress(handle)
            except Exception as e:  # the progress is a convenience: the result stands
                log.warning("cannot read the progress of %s: %s", handle, e)
        return JobResult(
            app_handle=handle, state=status.state, msg=mask_app_text(self.app, status.msg),
            ui_url=status.ui_url,
            outputs=outputs, num_restarts=max(status.num_restarts, 0), reattached=self.reattached,
            progress=progress.to_dict() if progress is not None else None,
        )

    def run(
        self, sink: LineSink | None = None, wait_interval: float = 5.0,
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
        skip: LogCursor | None = None,
        on_progress: ProgressSink | None = None,
        on_final: Callable[[JobResult], None] | None = None,
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
            drain_timeout: After the job finished, how long to wait for more log lines
                without a new one (see :meth:`LogPump.drain`).
            skip: Log cursor of an earlier follower: those lines are not delivered again.
            on_progress: Receives each new progress report of the job while it runs, and
                its last one once it has ended.
            on_final: Called with the result as soon as the job is final, before its last
                log lines are drained (to start what does not need them, e.g. a summary);
                the final status is in :attr:`final_status` by then.

        Returns:
            The result (whatever the final state).
        """
        handle = self._handle()
        if not self._scheduler_built:  # build it here, not concurrently in the log thread
            self.status()
            self._scheduler_built = True
        pump = LogPump(self.runner, handle, sink, skip).start() if sink is not None else None
        progress = ProgressWatch(on_progress) if on_progress is not None else None
        with self.follower.open_watch(handle, poll_interval) as watch:  # one subscription
            while True:
                if pump is not None:
                    pump.check()
                if progress is not None:
                    progress.poll(self.runner, handle)
                self._check_stop(should_stop)
                ev = watch.next(timeout=poll_interval)
                if ev is not None and (ev.final or ev.state == AppState.UNKNOWN):
                    self.final_status = ev.status
                    result = self.result(ev.status)
                    break
                if ev is None and not watch.open:  # already heard final: read it once
                    self.final_status = self.status()
                    result = self.result(self.final_status)
                    break
        if on_final is not None:
            on_final(result)
        if pump is not None:
            pump.drain(poll_interval, drain_timeout)
        if progress is not None and result.progress is not None:
            progress.offer(Progress.from_dict(result.progress))
        return result

    def _check_stop(self, should_stop: Callable[[], str | None] | None) -> None:
        if should_stop is None or self.stop_reason is not None:
            return
        reason = should_stop()
        if reason:
            self.stop_reason = reason
            log.info("stopping %s: %s", self.app_handle, reason)
            self.cancel()

    # ---- stop ------------------------------------------------------------------------------
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
            found = self.runner.find_job(self.scheduler, self.key, self.cfg)
            if found is not None and not found.status.is_terminal():
                self.app_handle = found.app_handle
        if self.app_handle is None:
            self._cancelled.set()
            return None
        self.cancel()
        return self.wait(wait_interval=poll_interval, timeout=timeout)

    def close(self) -> None:
        """Closes the runner if this session created it."""
        if self._own_runner:
            self.runner.close()
