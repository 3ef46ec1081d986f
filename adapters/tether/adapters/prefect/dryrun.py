"""Dry-run of a component task: the Prefect layer on top of the AppDef and native request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.adapters.common import app_secrets, render_dryrun, scheduler_list
from tether.runner import get_runner
from tether.specs import AppDryRunInfo, mask_value

if TYPE_CHECKING:
    from prefect import Task


@dataclass
class TaskDryRun:
    """What one call of a component task would run, layer by layer.

    Attributes:
        task: The Prefect layer: task name and options, job identity, tracking parent.
        app: The AppDef summary (secrets masked).
        request: The scheduler's native request (``str()`` redacts secrets).
    """

    task: dict[str, Any]
    app: dict[str, Any]
    request: AppDryRunInfo[Any]

    def __str__(self) -> str:
        import yaml

        return (
            "# Prefect task\n"
            + yaml.safe_dump(self.task, sort_keys=False)
            + "# tether AppDef\n"
            + yaml.safe_dump(self.app, sort_keys=False)
            + f"# {self.task['scheduler']} request\n"
            + f"{self.request}\n"
        )


def _spec_of(task: Any) -> Any:
    from tether.adapters.prefect.spec import SPEC_ATTR

    spec = getattr(getattr(task, "fn", None), SPEC_ATTR, None)
    if spec is None:
        raise TypeError(
            f"{task!r} is not a tether component task; build one with "
            "tether.adapters.prefect.component_task(component, ...)"
        )
    return spec


def dryrun(task: Task[..., Any], *args: Any, **kwargs: Any) -> TaskDryRun:
    """Renders what ``task(*args, **kwargs)`` would run, without running anything.

    Args:
        task: A task made by :func:`~tether.adapters.prefect.component_task` (options set
            with ``task.with_options(...)`` are shown too).
        *args: The call's positional arguments.
        **kwargs: The call's keyword arguments.

    Returns:
        The three layers; ``print()`` it.

    Raises:
        TypeError: When ``task`` is not a component task or the arguments do not fit it.
    """
    spec = _spec_of(task)
    try:
        bound = spec.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(
            f"arguments do not fit component {spec.component_name} {spec.signature}: {e}"
        ) from None
    with get_runner() as runner:
        scheduler = spec.resolve_scheduler(runner)
        candidates = scheduler_list(scheduler)  # a failover list: its first one's request
        first, cfg = candidates[0], dict(spec.cfg)
        if len(candidates) > 1:  # the options the first candidate declares
            own = runner.scheduler_run_opts(first)
            cfg = {k: v for k, v in cfg.items() if own.get(k) is not None}
        app = spec.materialize(runner, bound.arguments)
        app_summary, info = render_dryrun(app, first, cfg, runner)
    from prefect.cache_policies import NO_CACHE

    cache = getattr(task.cache_policy, "inner", None) or task.cache_policy
    layer: dict[str, Any] = {
        "name": task.name,
        "component": spec.component_name,
        "scheduler": scheduler,
        "cfg": dict(spec.cfg),
        "parameters": mask_value("parameters", spec.component_args(bound.arguments),
                                 app_secrets(app)),
        "retries": task.retries,
        "retry_delay_seconds": task.retry_delay_seconds,
        "timeout_seconds": task.timeout_seconds,
        "tags": sorted(task.tags),
        "cache_policy": "NO_CACHE" if cache is NO_CACHE else type(cache).__name__,
        "persist_result": task.persist_result,
        "job_key": "prefect-sha256(flow_run.id, task key, component/scheduler/cfg/image/env, "
        "call number, parameters): one job per call in a flow run, kept across task retries, "
        "flow retries and reruns of the flow run",
        "parent_run_id": "the flow run's id",
        "logs": "every replica's lines, as role/replica line, into the task run's logger",
        "artifacts": ["link to the job's UI (when the scheduler has one)", "job summary"],
    }
    return TaskDryRun(task=layer, app=app_summary, request=info)
