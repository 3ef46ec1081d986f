"""The body of a component task's run: one job per call, followed to its end.

:func:`run_component` is a thin shell around one :class:`~tether.adapters.common.JobSession`
(held by :class:`_TaskCall`): it submits or re-attaches to the job of this call (its key:
:mod:`tether.adapters.prefect.identity`), ships its logs (:mod:`.logship`), watches for
Prefect stopping the flow run (:mod:`.cancel`), publishes the artifacts and returns the
result, or a ``Cancelled`` state when the flow run was cancelled and the job with it.
:func:`run_component_async` runs it in a thread of its own (:class:`_TaskThread`) for async
tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.adapters.common import (
    JobFailedError,
    JobResult,
    JobSession,
    LogCursor,
    check_candidates,
    scheduler_list,
)
from tether.adapters.prefect.identity import (
    call_numbers,
    parameters_digest,
    tag_with_flow_run,
    task_job_key,
)
from tether.adapters.prefect.logship import LogShipper, shipped_cursor
from tether.runner import Runner, get_runner
from tether.specs import AppStatus

if TYPE_CHECKING:
    from tether.adapters.prefect.artifacts import ProgressArtifacts
    from tether.adapters.prefect.spec import TaskSpec
    from tether.tracker.progress import Progress

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 30.0
"""How long a stopped task waits for its cancelled job to reach a final state."""


class JobStoppedError(JobFailedError):
    """The task stopped the job because Prefect stopped the flow run."""

    def __init__(self, result: JobResult, reason: str) -> None:
        RuntimeError.__init__(
            self,
            f"tether job {result.app_handle} was cancelled because {reason}; "
            f"final state {result.state.name}",
        )
        self.result = result
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.result, self.reason))


class _TaskThread:
    """:func:`run_component` on a thread of its own, its outcome handed to an event loop.

    One thread per task (not the loop's small default pool): any number of component tasks
    follow their jobs concurrently.

    Args:
        spec: What to run.
        arguments: The task's bound arguments.
        loop: The event loop that awaits the outcome.
    """

    def __init__(
        self, spec: TaskSpec, arguments: Mapping[str, Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.spec = spec
        self.arguments = arguments
        self.loop = loop
        self.stop = threading.Event()
        self.outcome: asyncio.Future[Any] = loop.create_future()
        self._ctx = contextvars.copy_context()

    def start(self) -> _TaskThread:
        """Starts the thread.

        Returns:
            This object.
        """
        threading.Thread(target=self._work, name=f"tether-{self.spec.component_name}").start()
        return self

    def _work(self) -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = self._ctx.run(run_component, self.spec, self.arguments, self.stop)
        except BaseException as e:
            error = e
        try:
            self.loop.call_soon_threadsafe(self._settle, value, error)
        except RuntimeError:  # the event loop has closed: nobody waits for the result
            log.debug("result of %s dropped: the event loop closed", self.spec.component_name)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        if self.outcome.done():
            return
        if error is not None:
            self.outcome.set_exception(error)
        else:
            self.outcome.set_result(value)


async def run_component_async(spec: TaskSpec, arguments: Mapping[str, Any]) -> Any:
    """The body of an async component task: :func:`run_component` in a thread of its own.

    Cancelling the coroutine (a timeout, the flow's cancellation) tells the thread to cancel
    the job, and waits (up to ``STOP_TIMEOUT_SECONDS``) until it has stopped.

    Args:
        spec: What to run.
        arguments: The task's bound arguments.

    Returns:
        What :func:`run_component` returns.
    """
    import anyio

    task = _TaskThread(spec, arguments, asyncio.get_running_loop()).start()
    try:
        return await asyncio.shield(task.outcome)
    except asyncio.CancelledError:
        task.stop.set()
        with anyio.CancelScope(shield=True):  # cancelled scopes re-cancel every await
            await asyncio.wait([task.outcome], timeout=STOP_TIMEOUT_SECONDS + 10)
        raise


def run_component(
    spec: TaskSpec, arguments: Mapping[str, Any], stop: threading.Event | None = None
) -> Any:
    """The body of a component task: run (or re-attach to) the job of one task call.

    Args:
        spec: What to run.
        arguments: The task's bound arguments.
        stop: Set by another thread to cancel the job (the async variant's cancellation).

    Returns:
        The :class:`JobResult` of a job that SUCCEEDED, or a Prefect ``Cancelled`` state
        (which Prefect makes the task run's final state) when the flow run was cancelled
        and the job with it.

    Raises:
        JobFailedError: When the job did not succeed (its message is the job's own).
        RuntimeError: When called outside a Prefect task run.
    """
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    if ctx is None:
        raise RuntimeError(
            "a tether component task runs only as a Prefect task: call it inside a @flow "
            "(directly, or with .submit()/.map())"
        )
    call = _TaskCall(spec, ctx, stop)
    with contextlib.ExitStack() as stack:
        session, result = call.run(stack, arguments)
    call.logger.info("tether job %s finished %s", result.app_handle, result.state.name)
    if session.stop_reason and not result.succeeded:
        from prefect.states import Cancelled

        return Cancelled(message=str(JobStoppedError(result, session.stop_reason)))
    if not result.succeeded:
        raise JobFailedError(result)
    return result


class _TaskCall:
    """One call of a component task: holds its job session and what the task run gives it.

    Args:
        spec: What to run.
        ctx: The task run's context.
        stop: Set by another thread to cancel the job.
    """

    def __init__(self, spec: TaskSpec, ctx: Any, stop: threading.Event | None) -> None:
        from prefect import get_run_logger

        self.spec = spec
        self.task_run = ctx.task_run
        self.task_name = ctx.task.name
        self.logger = get_run_logger()
        self.stop = stop
        self.art_name = self.task_name
        self.client: Any = None
        self.watch: Any = None

    def run(
        self, stack: contextlib.ExitStack, arguments: Mapping[str, Any]
    ) -> tuple[JobSession, JobResult]:
        """Opens what the call needs on ``stack``, submits or attaches, follows the job.

        Args:
            stack: Closes the runner, the Prefect client and the cancel watch.
            arguments: The task's bound arguments.

        Returns:
            The session and the job's result.
        """
        from prefect.client.orchestration import get_client

        from tether.adapters.prefect.cancel import CancelWatch

        runner = stack.enter_context(_new_runner())
        self.client = stack.enter_context(get_client(sync_client=True))
        self.watch = CancelWatch(self.task_run.flow_run_id, self.task_run.id, client=self.client)
        stack.callback(self.watch.close)
        session: JobSession | None = None
        shipper: LogShipper | None = None
        try:
            session = self._session(runner, arguments)
            self._submit(session)
            shipper = _shipper(self.client, session, self.task_run.flow_run_id,
                               self.task_run.id, self.logger)
            return session, self._follow(session, shipper)
        except BaseException as e:
            if session is not None and not isinstance(e, Exception):
                _stop(self.art_name, session, e, self.logger)
                if shipper is not None:
                    _flush_quietly(shipper)
            self._abort_if_cancelled(e, session)
            raise

    def _abort_if_cancelled(self, exc: BaseException, session: JobSession | None) -> None:
        """A termination signal of a user's cancel: the task run ends Cancelled.

        Prefect records any ``TerminationSignal`` that leaves a task as a crash; so when the
        flow run is being cancelled the task sets ``Cancelled`` itself and leaves with
        ``Abort``, which Prefect passes on without a state of its own.

        Raises:
            Abort: When the flow run is being cancelled.
        """
        from prefect.exceptions import Abort, TerminationSignal
        from prefect.states import Cancelled

        from tether.adapters.prefect.cancel import cancelled_through_api

        if not isinstance(exc, TerminationSignal) or not cancelled_through_api(
                self.client, self.task_run.flow_run_id):
            return
        handle = session.app_handle if session is not None else None
        message = (f"the flow run {self.task_run.flow_run_id} was cancelled; "
                   f"tether job {handle or '(not submitted)'} was cancelled with it")
        try:
            self.client.set_task_run_state(self.task_run.id, Cancelled(message=message),
                                           force=True)
        except Exception as e:  # the API gone: Prefect records the crash as before
            self.logger.warning("cannot mark task run %s Cancelled: %s", self.task_run.id, e)
            return
        raise Abort(message) from exc

    def _session(self, runner: Runner, arguments: Mapping[str, Any]) -> JobSession:
        spec, task_run = self.spec, self.task_run
        step = f"task {self.task_name!r}"
        schedulers = scheduler_list(spec.resolve_scheduler(runner), step)
        check_candidates(runner, schedulers, spec.cfg, step)  # before anything is submitted
        app = spec.materialize(runner, arguments)
        check_candidates(runner, schedulers, spec.cfg, step, app=app)  # its capabilities
        component_args = spec.component_args(arguments)
        same, nth = call_numbers(
            _flow_counters(), task_run.task_key, parameters_digest(component_args), task_run.id,
        )
        key = task_job_key(task_run.flow_run_id, task_run.task_key, same, component_args,
                           task_run.id, spec.digest())
        self.art_name = self.task_name if nth == 0 else f"{self.task_name}-{nth}"
        tag_with_flow_run(app, task_run.flow_run_id)
        return JobSession(app, schedulers, spec.cfg, key=key,
                          parent_run_id=str(task_run.flow_run_id or task_run.id), runner=runner)

    def _submit(self, session: JobSession) -> None:
        reason = self.watch.reason()
        if reason:
            raise RuntimeError(f"not submitting the tether job of {self.task_name}: {reason}")
        session.submit()
        self.logger.info(
            "%s tether job %s (%s) on %s (attempt %d)",
            "re-attached to" if session.reattached else "submitted", session.app_handle,
            session.app.name, session.scheduler, self.task_run.run_count,
        )
        _publish_link(self.art_name, session, self.logger)

    def _should_stop(self, shipper: LogShipper, handle: str | None) -> str | None:
        shipper.tick()
        reason = self.watch.reason()
        if reason is None and self.stop is not None and self.stop.is_set():
            reason = "the task was cancelled"
        if reason:
            self.logger.warning("%s: cancelling tether job %s", reason, handle)
        return reason

    def _show_progress(self, artifacts: ProgressArtifacts, progress: Progress) -> None:
        self.logger.info("tether progress: %s", progress.format())
        artifacts.show(progress)

    def _follow(self, session: JobSession, shipper: LogShipper) -> JobResult:
        from tether.adapters.prefect.artifacts import ProgressArtifacts

        artifacts = ProgressArtifacts(self.client, self.art_name, self.task_run.flow_run_id,
                                      self.task_run.id)
        summaries: list[threading.Thread] = []

        def publish(result: JobResult) -> None:
            # the summary goes out while the last log lines are read and sent
            thread = threading.Thread(
                target=contextvars.copy_context().run,
                args=(_publish_summary, self.art_name, session, result, self.logger,
                      self.client, self.task_run, artifacts),
                name="tether-summary",
            )
            thread.start()
            summaries.append(thread)

        try:
            result = session.follow(
                shipper, self.spec.poll_interval,
                should_stop=lambda: self._should_stop(shipper, session.app_handle),
                skip=shipper.cursor,
                on_progress=lambda progress: self._show_progress(artifacts, progress),
                on_final=publish,
            )
            shipper.close()
        finally:
            for thread in summaries:
                thread.join()
        return result


def _flush_quietly(shipper: LogShipper) -> None:
    """Sends the lines read so far of a job that was stopped (best effort)."""
    try:
        shipper.close()
    except BaseException as e:
        log.warning("cannot send the last log lines: %s", e)


def _shipper(
    client: Any, session: JobSession, flow_run_id: Any, task_run_id: Any, logger: Any
) -> LogShipper:
    """The log sink of a job: one that re-attached skips the lines earlier attempts shipped
    (counted from the Prefect API: :func:`~.logship.shipped_cursor`); a new job reads
    nothing."""
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED

    if not PREFECT_LOGGING_TO_API_ENABLED.value():  # logs to the API are switched off
        flow_run_id = None
    handle = session.app_handle or ""
    cursor = LogCursor()
    if session.reattached and flow_run_id is not None:
        try:
            cursor = shipped_cursor(client, flow_run_id, handle)
        except Exception as e:  # the lines then show again: better than losing them
            logger.warning("cannot count the log lines of %s already shown: %s", handle, e)
        if cursor.seen:
            logger.info("resuming the logs of %s after %d line(s) already shown",
                        handle, sum(cursor.seen.values()))

    def echo(text: str) -> None:
        logger.info(text, extra={"send_to_api": False})

    return LogShipper(client, flow_run_id, task_run_id, handle, cursor, echo=echo)


def _stop(task_name: str, job: JobSession, exc: BaseException, logger: Any) -> None:
    """Prefect interrupted the task (timeout, termination, cancellation): cancel the job."""
    what = type(exc).__name__
    try:
        logger.warning("task interrupted (%s): cancelling tether job %s", what, job.app_handle)
        result = job.cancel_and_wait(timeout=STOP_TIMEOUT_SECONDS)
    except BaseException as e:  # a second signal, an API error: try the bare cancel once more
        log.warning("cancelling %s after %s failed: %s", job.app_handle, what, e)
        try:
            job.cancel()
        except Exception as e2:
            log.error("cannot cancel %s: %s", job.app_handle, e2)
        return
    if result is not None:
        logger.warning("tether job %s is %s", result.app_handle, result.state.name)
        _publish_summary(task_name, job, result, logger)


def _final_status(job: JobSession) -> AppStatus | None:
    if job.final_status is not None:  # what the follow saw end (no second read)
        return job.final_status
    try:
        return job.status()
    except Exception:
        return None


def _new_runner() -> Runner:
    """A runner for one task (the scheduler registry's entry points are cached by tether)."""
    return get_runner()


def _flow_counters() -> dict[str, Any] | None:
    """The per-run-of-the-flow dict tether numbers task calls in (see ``call_numbers``)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    counters = getattr(ctx, "task_run_dynamic_keys", None) if ctx is not None else None
    return counters if isinstance(counters, dict) else None


def _publish_link(task_name: str, job: JobSession, logger: Any) -> None:
    from tether.adapters.prefect.artifacts import create_link

    try:
        if not _may_link(job):
            return
        status = job.status()
        if status is None or not status.ui_url:
            return
        create_link(task_name, job.result(status))
    except Exception as e:
        logger.warning("cannot create the link artifact of %s: %s", job.app_handle, e)


def _may_link(job: JobSession) -> bool:
    """False when the job's scheduler declares it gives no UI page (no status read then)."""
    from tether.specs import parse_app_handle

    try:
        backend = parse_app_handle(job.app_handle or "").scheduler_backend
        return job.runner.scheduler_capabilities(backend).ui_urls
    except Exception:  # e.g. a logical job's handle: look at its status
        return True


def _publish_summary(
    task_name: str,
    job: JobSession,
    result: JobResult,
    logger: Any,
    client: Any = None,
    task_run: Any = None,
    artifacts: ProgressArtifacts | None = None,
) -> None:
    from tether.adapters.prefect.artifacts import create_summary
    from tether.tracker.progress import Progress

    if artifacts is not None and result.progress is not None:
        try:
            artifacts.show_metrics(Progress.from_dict(result.progress))
        except Exception as e:
            logger.warning("cannot create the metrics artifact of %s: %s", result.app_handle, e)
    try:
        create_summary(
            task_name, job.scheduler, job.app, result, _final_status(job), job.key,
            client=client, flow_run_id=getattr(task_run, "flow_run_id", None),
            task_run_id=getattr(task_run, "id", None),
        )
    except Exception as e:
        logger.warning("cannot create the summary artifact of %s: %s", result.app_handle, e)
