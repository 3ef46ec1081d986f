"""How an Airflow task turns into a tether job: names, keys, arguments and options.

Pure helpers the operator, the factory and the dry-run share (no Airflow import).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.adapters.common import job_key, materialize, resolve_component
from tether.specs import AppDef, CfgVal

if TYPE_CHECKING:
    from tether.runner import Runner

DEFAULT_SCHEDULER = "local_cwd"
"""The scheduler used when the operator names none."""
TTL_OPTION = "ttl_seconds_after_finished"
"""The run option that ``job_ttl`` sets (Kubernetes: the Jobs' ``ttlSecondsAfterFinished``)."""

ORCHESTRATOR = "airflow"

ComponentRef = str | Callable[..., AppDef]
ComponentArgs = Mapping[str, Any] | Sequence[Any] | str | None


def task_job_key(
    dag_id: str, run_id: str, task_id: str, map_index: int | None, try_number: int
) -> str:
    """The job key of the job one try of an Airflow task instance launches.

    Args:
        dag_id: The DAG.
        run_id: The DAG run.
        task_id: The task.
        map_index: The map index (-1 or None for an unmapped task).
        try_number: The try that launches the job.

    Returns:
        The job key.
    """
    mi = -1 if map_index is None else map_index
    return job_key(ORCHESTRATOR, dag_id, run_id, task_id, mi, "try", try_number)


def dag_run_parent_id(dag_id: str, run_id: str) -> str:
    """The tracking parent run id of the jobs of one DAG run: ``airflow:{dag_id}/{run_id}``.

    Args:
        dag_id: The DAG.
        run_id: The DAG run.

    Returns:
        The parent run id.
    """
    return f"{ORCHESTRATOR}:{dag_id}/{run_id}"


def component_display_name(component: ComponentRef) -> str:
    """How a component is shown: its name, or ``module:function`` for a function.

    Args:
        component: A name or a component function.

    Returns:
        The name.
    """
    if isinstance(component, str):
        return component
    return f"{getattr(component, '__module__', '?')}:{getattr(component, '__qualname__', '?')}"


def normalize_component_args(value: Any) -> list[str] | dict[str, Any]:
    """Turns rendered ``component_args`` into what the component parser takes.

    Args:
        value: A mapping of keyword arguments, a list of CLI arguments, one CLI string
            (split like a shell would), or None.

    Returns:
        A dict, or a list of strings.

    Raises:
        TypeError: For any other type.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise TypeError(
        f"component_args must be a dict of keyword arguments, a list of CLI arguments or a "
        f"CLI string, got {type(value).__name__}: {value!r}"
    )


def parse_cfg(runner: Runner, scheduler: str, cfg: Any) -> dict[str, CfgVal]:
    """Run options from a mapping, or a ``k=v,k2=v2`` string as ``tether run -cfg`` takes.

    Args:
        runner: The runner (for the scheduler's option types).
        scheduler: The scheduler.
        cfg: The options (None for none).

    Returns:
        The options (string values are converted to their types when the job is submitted).

    Raises:
        TypeError: For any other type.
    """
    if cfg is None or cfg == "":
        return {}
    if isinstance(cfg, str):
        return runner.scheduler_run_opts(scheduler).cfg_from_str(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    raise TypeError(
        f"cfg must be a dict of run options or a 'k=v,k2=v2' string, got {type(cfg).__name__}"
    )


def build_component_app(
    component: ComponentRef,
    component_args: Any,
    image: str | None = None,
    env: Mapping[str, Any] | None = None,
    runner: Runner | None = None,
) -> AppDef:
    """Materializes a component with rendered arguments and image/env overrides.

    Args:
        component: The component (name or function).
        component_args: See :func:`normalize_component_args`.
        image: Replaces every role's image.
        env: Added to every role's environment.
        runner: Gives ``[component:<name>]`` defaults from ``.tetherconfig``.

    Returns:
        The AppDef.
    """
    name, _ = resolve_component(component)
    defaults = runner.config.component_defaults(name) if runner is not None else None
    env_str = {str(k): str(v) for k, v in (env or {}).items()}
    return materialize(
        component,
        normalize_component_args(component_args),
        image=image or None,
        env=env_str or None,
        defaults=defaults,
    )


@dataclass(frozen=True)
class ComponentFunction:
    """A component function held by an operator (shown as ``module:function``).

    Attributes:
        fn: The function.
    """

    fn: Callable[..., AppDef]

    def __str__(self) -> str:
        return component_display_name(self.fn)


def check_component(component: Any, task_id: str) -> None:
    """Fails at DAG parse time on a component that is neither a name nor a function.

    A literal registered name (``utils.echo``: no template, no ``file.py:fn`` or
    ``module:fn``) is looked up now, so a typo fails the DAG file's import with the close
    matches instead of failing the task when it runs. Files and modules are found where the
    task runs, so they are not looked up here.

    Args:
        component: The operator's ``component``.
        task_id: The task (for the message).

    Raises:
        ValueError: An empty name, or a registered name nothing has.
        TypeError: Anything else.
    """
    if isinstance(component, str):
        if not component.strip():
            raise ValueError(
                f"task {task_id!r}: component is empty; give a name as the CLI takes it "
                "(e.g. 'dist.ddp', 'utils.python', 'path/to/file.py:fn') or a component function"
            )
        if not any(c in component for c in ("{{", "{%", ":", "/")):
            try:
                resolve_component(component)
            except ValueError as e:
                raise type(e)(f"task {task_id!r}: {e}") from None
        return
    if not callable(component):
        raise TypeError(
            f"task {task_id!r}: component must be a name (e.g. 'dist.ddp') or a component "
            f"function returning an AppDef, got {type(component).__name__}"
        )
