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

import inspect
import keyword
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from tether.adapters.common import (
    JobResult,
    component_params,
    resolve_component,
    scheduler_list,
)
from tether.adapters.prefect.identity import (
    ORCHESTRATOR,
)
from tether.adapters.prefect.run import (
    JobStoppedError,
    run_component,
    run_component_async,
)
from tether.adapters.prefect.spec import SPEC_ATTR, TaskSpec
from tether.specs import AppDef, CfgVal

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

__all__ = [
    "ORCHESTRATOR",
    "SPEC_ATTR",
    "JobStoppedError",
    "TaskSpec",
    "component_task",
    "run_component",
]

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


def _scheduler_text(scheduler: str | Sequence[str] | None) -> str | None:
    """A task's scheduler, or its failover list as ``a,b`` (as ``tether run -s``); a list
    that names no scheduler fails when the flow is defined."""
    if scheduler is None or (isinstance(scheduler, str) and not scheduler):
        return None
    return ",".join(scheduler_list(scheduler, "component_task"))


@overload
def component_task(
    component: str | Callable[..., AppDef],
    scheduler: str | Sequence[str] | None = None,
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
    scheduler: str | Sequence[str] | None = None,
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
    scheduler: str | Sequence[str] | None = None,
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
            ``local_cwd``), or the schedulers to try in order (``["kubernetes", "local_cwd"]``
            or ``"kubernetes,local_cwd"``): the job then runs as one logical job that moves
            to the next candidate when one refuses it for capacity (``docs/recovery.md``).
        cfg: The scheduler's run options (with several schedulers, each gets those it
            declares; one none declares, or a candidate would not take, fails the task run
            before anything is submitted).
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
            on everything the job runs; Prefect's own policies are scoped to the component,
            scheduler, cfg, image and env); ``persist_result=True`` alone stores each result
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
    from tether.adapters.prefect.cache import default_cache_policy, scope_cache_policy

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
        scheduler=_scheduler_text(scheduler),
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
    task = _task_class()(fn=_task_function(spec, str(options["name"])), **options)
    task.cache_policy = scope_cache_policy(task.cache_policy)
    return cast("ComponentTask[Any]", task)


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
            scheduler: str | Sequence[str] | None = _KEEP,
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
            if scheduler is not _KEEP:
                changes["scheduler"] = _scheduler_text(scheduler)
            if image is not _KEEP:
                changes["image"] = image
            for name, mapping in (("cfg", cfg), ("env", env)):
                if mapping is not _KEEP:
                    changes[name] = dict(mapping or {})
            if poll_interval is not _KEEP:
                if poll_interval <= 0:
                    raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
                changes["poll_interval"] = poll_interval
            from tether.adapters.prefect.cache import scope_cache_policy

            new = super().with_options(**options)
            new.__class__ = type(self)
            new.cache_policy = scope_cache_policy(new.cache_policy)
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
