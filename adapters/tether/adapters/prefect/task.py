"""``component_task``: a tether component as a Prefect task.

The task's parameters are the component's own (same names, types and defaults, through
``inspect.Signature``), so it is called like the component, also with ``.submit()`` and
``.map()``. Running it materializes the AppDef, submits it through the Runner (or re-attaches
to the job an earlier run of the same call launched), ships every replica's log lines to
the task run's logs (:mod:`tether.adapters.prefect.logship`), waits, publishes artifacts and
returns a :class:`~tether.adapters.common.JobResult` (the job's outputs and final state). A
job that does not succeed raises :class:`~tether.adapters.common.JobFailedError` with the
job's own message.

Job identity (:mod:`tether.adapters.prefect.identity`): flow run id + task key + dynamic key
+ parameters. A task retry, a flow retry and a rerun of a crashed flow run re-attach to the
job (or take the result of one that succeeded); a failed or cancelled job is resubmitted.

Stopping: a task timeout, the flow run's termination signal or its cancellation cancels the
job and waits until it has stopped (see :mod:`tether.adapters.prefect.cancel`); a job
cancelled because the flow run was cancelled ends the task run CANCELLED. Any other
exception of the task itself (e.g. the Prefect API failing while logging) leaves the job
running, so the retry can re-attach to it.
"""

from __future__ import annotations

import contextvars
import inspect
import keyword
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from tether.adapters.common import (
    ComponentJob,
    JobFailedError,
    JobResult,
    component_params,
    materialize,
    resolve_component,
)
from tether.adapters.prefect.identity import (
    ORCHESTRATOR,
    call_numbers,
    parameters_digest,
    tag_with_flow_run,
    task_job_key,
)
from tether.adapters.prefect.logship import LogShipper, read_cursor
from tether.runner import Runner
from tether.specs import AppDef, AppStatus, CfgVal

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from prefect import Task

    R = TypeVar("R")

    class ComponentTask(Task[..., R]):
        """How type checkers see a component task (the runtime class is built lazily)."""

        def with_options(
            self,
            *,
            scheduler: str | None = ...,
            cfg: Mapping[str, CfgVal] | None = ...,
            image: str | None = ...,
            env: Mapping[str, str] | None = ...,
            poll_interval: float = ...,
            **options: Any,
        ) -> ComponentTask[R]: ...

log = logging.getLogger(__name__)

__all__ = ["ORCHESTRATOR", "JobStoppedError", "TaskSpec", "component_task", "run_component"]

SPEC_ATTR = "__tether_spec__"
"""Attribute of the task's function holding its :class:`TaskSpec`."""

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


@dataclass(frozen=True)
class TaskSpec:
    """What a component task runs (kept on the task's function for dry-runs).

    Attributes:
        component: The component as given (name or function).
        component_name: Its resolved name (``utils.python``, ``module:fn``).
        fn: The component function.
        signature: The component's signature (annotations evaluated).
        scheduler: The scheduler, or None for the configured default.
        cfg: Run options.
        image: Replaces every role's image, when set.
        env: Added to every role's env.
        poll_interval: Longest single wait while following the job, in seconds.
        asynchronous: Whether the task is a coroutine function (for async flows).
    """

    component: str | Callable[..., AppDef]
    component_name: str
    fn: Callable[..., AppDef]
    signature: inspect.Signature
    scheduler: str | None = None
    cfg: Mapping[str, CfgVal] = field(default_factory=dict)
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    poll_interval: float = 1.0
    asynchronous: bool = False

    def digest(self) -> str:
        """A hash of what the task runs besides its parameters: component, scheduler, cfg,
        image and env (env values enter only hashed). Part of the job key and cache key.

        Returns:
            Hex digest.
        """
        import hashlib

        env = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in self.env.items()}
        return parameters_digest({
            "component": self.component_name, "scheduler": self.scheduler,
            "cfg": dict(self.cfg), "image": self.image, "env": env,
        })

    def component_args(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The component's keyword arguments from the task's bound arguments.

        Values equal to the signature's default are left out, so that ``[component:<name>]``
        defaults of ``.tetherconfig`` apply as they do on the command line.

        Args:
            arguments: Parameter name to value (``*args`` as a tuple).

        Returns:
            Arguments for :func:`tether.adapters.common.materialize`.
        """
        out: dict[str, Any] = {}
        for name, value in arguments.items():
            param = self.signature.parameters[name]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    out[name] = list(value)
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            elif not _is_default(param, value):
                out[name] = value
        return out

    def resolve_scheduler(self, runner: Runner) -> str:
        """The scheduler to use: the given one, ``[cli:run] scheduler``, or the first known.

        Args:
            runner: The runner (for ``.tetherconfig`` and the scheduler registry).

        Returns:
            The scheduler's name.
        """
        if self.scheduler:
            return self.scheduler
        configured = runner.config.cli_defaults("run").get("scheduler")
        return configured or runner.scheduler_backends()[0]

    def materialize(self, runner: Runner, arguments: Mapping[str, Any]) -> AppDef:
        """Builds the AppDef for one call.

        Args:
            runner: The runner (for ``.tetherconfig`` component defaults).
            arguments: The task's bound arguments.

        Returns:
            The AppDef.
        """
        return materialize(
            self.component,
            self.component_args(arguments),
            image=self.image,
            env=self.env or None,
            defaults=runner.config.component_defaults(self.component_name),
        )


def _is_default(param: inspect.Parameter, value: Any) -> bool:
    default = param.default
    if default is inspect.Parameter.empty:
        return False
    return value is default or (type(value) is type(default) and value == default)


def component_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The component's signature with its annotations evaluated (for Prefect and pydantic).

    Args:
        fn: The component function.

    Returns:
        The signature, returning :class:`JobResult`.
    """
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, SyntaxError):
        sig = inspect.signature(fn)
    return sig.replace(return_annotation=JobResult)


def _task_options(task_options: Mapping[str, Any]) -> None:
    import difflib

    from prefect import Task

    allowed = [p for p in inspect.signature(Task.__init__).parameters if p not in ("self", "fn")]
    for key in task_options:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise TypeError(
                f"component_task() got an unknown Prefect task option {key!r}.{hint} "
                f"Allowed: {', '.join(allowed)}"
            )


def _identifier(name: str) -> str:
    ident = re.sub(r"\W+", "_", name).strip("_") or "component"
    if ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"c_{ident}"
    return f"tether_{ident}"


@overload
def component_task(
    component: str | Callable[..., AppDef],
    scheduler: str | None = None,
    cfg: Mapping[str, CfgVal] | None = None,
    *,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    poll_interval: float = 1.0,
    asynchronous: Literal[False] = False,
    **task_options: Any,
) -> ComponentTask[JobResult]: ...


@overload
def component_task(
    component: str | Callable[..., AppDef],
    scheduler: str | None = None,
    cfg: Mapping[str, CfgVal] | None = None,
    *,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    poll_interval: float = 1.0,
    asynchronous: Literal[True],
    **task_options: Any,
) -> ComponentTask[Coroutine[Any, Any, JobResult]]: ...


def component_task(
    component: str | Callable[..., AppDef],
    scheduler: str | None = None,
    cfg: Mapping[str, CfgVal] | None = None,
    *,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    poll_interval: float = 1.0,
    asynchronous: bool = False,
    **task_options: Any,
) -> ComponentTask[Any]:
    """Turns a tether component into a Prefect task.

    Example::

        train = component_task("dist.ddp", scheduler="local_cwd", retries=1)

        @flow
        def pipeline() -> None:
            result = train(script="train.py", j="1x2")
            print(result.outputs)

    Args:
        component: ``utils.python``, ``path/file.py:fn``, ``pkg.module:fn`` or the function.
        scheduler: Where jobs run (default: ``[cli:run] scheduler`` of ``.tetherconfig``, else
            ``local_cwd``).
        cfg: The scheduler's run options.
        image: Replaces every role's image.
        env: Added to every role's environment.
        poll_interval: Longest single wait while following a job, in seconds; bounds how
            quickly a timeout or cancellation reaches the job.
        asynchronous: Make an ``async`` task (``await train(...)`` in an async flow; many
            run concurrently with ``asyncio.gather``). The job is followed in a worker
            thread; cancelling the coroutine cancels the job.
        **task_options: Prefect task options (``name``, ``retries``, ``retry_delay_seconds``,
            ``timeout_seconds``, ``tags``, ``task_run_name``, ``cache_policy``,
            ``persist_result``...). Caching is off (``NO_CACHE``) unless ``cache_policy`` or
            ``cache_key_fn`` is given (:data:`tether.adapters.prefect.cache.JOB_INPUTS` keys
            on everything the job runs); ``persist_result=True`` alone stores each result
            under the job's identity (:mod:`tether.adapters.prefect.cache`).

    Returns:
        The task. Its parameters are the component's; it returns a :class:`JobResult`.
        ``task.with_options(scheduler=, cfg=, image=, env=, poll_interval=, ...)`` makes a
        variant (with Prefect's options too).

    Raises:
        TypeError: For an unknown task option.
        ValueError: For a non-positive ``poll_interval``, an unknown component name (the
            message lists close matches) or a function that is not a valid component.
    """
    from tether.adapters.prefect.cache import default_cache_policy

    _task_options(task_options)
    if poll_interval <= 0:
        raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
    component_name, fn = resolve_component(component)
    component_params(fn)  # an invalid component fails here, when the flow is defined
    spec = TaskSpec(
        component=component,
        component_name=component_name,
        fn=fn,
        signature=component_signature(fn),
        scheduler=scheduler,
        cfg=dict(cfg or {}),
        image=image,
        env=dict(env or {}),
        poll_interval=poll_interval,
        asynchronous=asynchronous,
    )
    options: dict[str, Any] = dict(task_options)
    options.setdefault(
        "name", component if isinstance(component, str) else getattr(fn, "__name__", "component")
    )
    if "cache_policy" not in options and "cache_key_fn" not in options:
        options["cache_policy"] = default_cache_policy(options.get("persist_result"))
    doc = inspect.getdoc(fn) or ""
    if doc and "description" not in options:
        options["description"] = doc.split("\n\n", 1)[0]
    return cast("ComponentTask[Any]",
                _task_class()(fn=_task_function(spec, str(options["name"])), **options))


_KEEP: Any = object()
_TASK_CLASS: list[type[Any]] = []


def _task_class() -> type[Task[..., Any]]:
    """``ComponentTask``, a ``prefect.Task`` whose ``with_options`` also takes tether's
    options (built on first use: ``prefect`` is imported lazily)."""
    if _TASK_CLASS:
        return _TASK_CLASS[0]
    from prefect import Task

    class ComponentTask(Task):
        """A tether component as a Prefect task (see :func:`component_task`)."""

        def with_options(
            self,
            *,
            scheduler: str | None = _KEEP,
            cfg: Mapping[str, CfgVal] | None = _KEEP,
            image: str | None = _KEEP,
            env: Mapping[str, str] | None = _KEEP,
            poll_interval: float = _KEEP,
            **options: Any,
        ) -> Any:
            """A copy with other options: tether's (``scheduler``, ``cfg``, ``image``,
            ``env``, ``poll_interval``) and Prefect's (``retries``, ``name``...)."""
            spec: TaskSpec = getattr(self.fn, SPEC_ATTR)
            changes: dict[str, Any] = {}
            for name, value in (("scheduler", scheduler), ("image", image)):
                if value is not _KEEP:
                    changes[name] = value
            for name, mapping in (("cfg", cfg), ("env", env)):
                if mapping is not _KEEP:
                    changes[name] = dict(mapping or {})
            if poll_interval is not _KEEP:
                if poll_interval <= 0:
                    raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
                changes["poll_interval"] = poll_interval
            new = super().with_options(**options)
            new.__class__ = type(self)
            if changes:
                new.fn = _task_function(replace(spec, **changes), new.name)
            return new

    _TASK_CLASS.append(ComponentTask)
    return ComponentTask


def _task_function(spec: TaskSpec, task_name: str) -> Callable[..., Any]:
    run: Callable[..., Any]
    if spec.asynchronous:

        async def arun(*args: Any, **kwargs: Any) -> Any:
            bound = spec.signature.bind(*args, **kwargs)
            return await run_component_async(spec, bound.arguments)

        run = arun
    else:

        def srun(*args: Any, **kwargs: Any) -> Any:
            bound = spec.signature.bind(*args, **kwargs)
            return run_component(spec, bound.arguments)

        run = srun
    run.__name__ = run.__qualname__ = _identifier(task_name)
    run.__doc__ = spec.fn.__doc__
    setattr(run, "__signature__", spec.signature)  # noqa: B010
    setattr(run, SPEC_ATTR, spec)
    return run


async def run_component_async(spec: TaskSpec, arguments: Mapping[str, Any]) -> Any:
    """The body of an async component task: :func:`run_component` in a worker thread.

    Cancelling the coroutine (a timeout, the flow's cancellation) tells the thread to cancel
    the job, and waits (up to ``STOP_TIMEOUT_SECONDS``) until it has stopped.

    Args:
        spec: What to run.
        arguments: The task's bound arguments.

    Returns:
        What :func:`run_component` returns.
    """
    import asyncio

    import anyio

    stop = threading.Event()
    ctx = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def work() -> None:
        # one thread per task (not the loop's small default pool): any number of
        # component tasks follow their jobs concurrently
        value: Any = None
        error: BaseException | None = None
        try:
            value = ctx.run(run_component, spec, arguments, stop)
        except BaseException as e:
            error = e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the event loop has closed: nobody waits for the result
            log.debug("result of %s dropped: the event loop closed", spec.component_name)

    threading.Thread(target=work, name=f"tether-{spec.component_name}").start()
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        stop.set()
        with anyio.CancelScope(shield=True):  # cancelled scopes re-cancel every await
            await asyncio.wait([fut], timeout=STOP_TIMEOUT_SECONDS + 10)
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
    from prefect import get_run_logger
    from prefect.client.orchestration import get_client
    from prefect.context import TaskRunContext

    from tether.adapters.prefect.cancel import CancelWatch

    ctx = TaskRunContext.get()
    if ctx is None:
        raise RuntimeError(
            "a tether component task runs only as a Prefect task: call it inside a @flow "
            "(directly, or with .submit()/.map())"
        )
    task_run = ctx.task_run
    task_name = ctx.task.name
    logger = get_run_logger()
    flow_run_id = task_run.flow_run_id
    runner = _new_runner()
    client: Any = get_client(sync_client=True)
    client.__enter__()
    watch = CancelWatch(flow_run_id, task_run.id, client=client)
    job: ComponentJob | None = None
    try:
        try:
            scheduler = spec.resolve_scheduler(runner)
            app = spec.materialize(runner, arguments)
            component_args = spec.component_args(arguments)
            same, nth = call_numbers(
                _flow_counters(), task_run.task_key, parameters_digest(component_args),
                task_run.id,
            )
            key = task_job_key(flow_run_id, task_run.task_key, same, component_args,
                               task_run.id, spec.digest())
            art_name = task_name if nth == 0 else f"{task_name}-{nth}"
            tag_with_flow_run(app, flow_run_id)
            job = ComponentJob(
                app, scheduler, spec.cfg, key=key,
                parent_run_id=str(flow_run_id or task_run.id), runner=runner,
            )
            reason = watch.reason()
            if reason:
                raise RuntimeError(f"not submitting the tether job of {task_name}: {reason}")
            handle = job.submit()
            logger.info(
                "%s tether job %s (%s) on %s (attempt %d)",
                "re-attached to" if job.reattached else "submitted", handle, app.name,
                scheduler, task_run.run_count,
            )
            _publish_link(art_name, job, logger)
            shipper = _shipper(client, job, flow_run_id, task_run.id, logger)

            def should_stop() -> str | None:
                shipper.tick()
                reason = watch.reason()
                if reason is None and stop is not None and stop.is_set():
                    reason = "the task was cancelled"
                if reason:
                    logger.warning("%s: cancelling tether job %s", reason, handle)
                return reason

            result = job.follow(shipper, spec.poll_interval, should_stop=should_stop,
                                skip=dict(shipper.cursor))
            # the summary goes out while the last log lines and the cursor are sent
            summary = threading.Thread(
                target=contextvars.copy_context().run,
                args=(_publish_summary, art_name, job, result, logger, client, task_run),
                name="tether-summary",
            )
            summary.start()
            try:
                shipper.close()
            finally:
                summary.join()
        except BaseException as e:
            if job is not None and not isinstance(e, Exception):
                _stop(art_name, job, e, logger)
            raise
    finally:
        watch.close()
        client.__exit__(None, None, None)
        runner.close()
    logger.info("tether job %s finished %s", result.app_handle, result.state.name)
    if job.stop_reason and not result.succeeded:
        from prefect.states import Cancelled

        return Cancelled(message=str(JobStoppedError(result, job.stop_reason)))
    if not result.succeeded:
        raise JobFailedError(result)
    return result


def _shipper(
    client: Any, job: ComponentJob, flow_run_id: Any, task_run_id: Any, logger: Any
) -> LogShipper:
    """The log sink of a job: resumes from the cursor of an earlier attempt that re-attached."""
    cursor: dict[str, int] = {}
    exists = False
    if job.reattached and job.key:
        try:
            cursor, exists = read_cursor(client, job.key, job.app_handle or "")
        except Exception as e:
            logger.warning("cannot read the log cursor of %s: %s", job.app_handle, e)
        if cursor:
            logger.info("resuming the logs of %s after %d line(s) already shown",
                        job.app_handle, sum(cursor.values()))

    def echo(text: str) -> None:
        logger.info(text, extra={"send_to_api": False})

    return LogShipper(client, flow_run_id, task_run_id, job.key, job.app_handle or "",
                      cursor, exists, echo=echo)


def _stop(task_name: str, job: ComponentJob, exc: BaseException, logger: Any) -> None:
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


def _final_status(job: ComponentJob) -> AppStatus | None:
    try:
        return job.status()
    except Exception:
        return None


_FACTORIES: list[Any] = []


def _new_runner() -> Runner:
    """A runner for one task; the scheduler registry (entry points) is read once per process."""
    if not _FACTORIES:
        from tether.schedulers import get_scheduler_factories

        _FACTORIES.append(get_scheduler_factories())
    factories = _FACTORIES[0]
    return Runner(scheduler_factories=factories, scheduler_params={n: {} for n in factories})


def _flow_counters() -> dict[str, Any] | None:
    """The per-run-of-the-flow dict tether numbers task calls in (see ``call_numbers``)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    counters = getattr(ctx, "task_run_dynamic_keys", None) if ctx is not None else None
    return counters if isinstance(counters, dict) else None


def _publish_link(task_name: str, job: ComponentJob, logger: Any) -> None:
    from tether.adapters.prefect.artifacts import create_link

    try:
        status = job.status()
        if status is None or not status.ui_url:
            return
        create_link(task_name, job.result(status))
    except Exception as e:
        logger.warning("cannot create the link artifact of %s: %s", job.app_handle, e)


def _publish_summary(
    task_name: str,
    job: ComponentJob,
    result: JobResult,
    logger: Any,
    client: Any = None,
    task_run: Any = None,
) -> None:
    from tether.adapters.prefect.artifacts import create_summary

    try:
        create_summary(
            task_name, job.scheduler, job.app, result, _final_status(job), job.key,
            client=client, flow_run_id=getattr(task_run, "flow_run_id", None),
            task_run_id=getattr(task_run, "id", None),
        )
    except Exception as e:
        logger.warning("cannot create the summary artifact of %s: %s", result.app_handle, e)
