"""``ComponentOperator``: a tether component as one Airflow task.

The task materializes the component's AppDef, submits it through the Runner (or re-attaches
to the job an earlier attempt of the same task launched), streams every replica's log into
the task log (``role/replica line``), waits, and returns the job's published outputs. It
pushes the XComs ``app_handle`` (right after submission), ``state`` and ``ui_url``; a job that
does not succeed fails the task with the job's own message.

**Job identity.** The job key is derived from ``dag_id``, ``run_id``, ``task_id`` and
``map_index``: retries of one task instance share it, so a retry (or a new attempt after a
worker crash) re-attaches to a job that is still running, takes the result of one that
succeeded, and submits a new job only when the previous one failed or was cancelled.

**Deferrable mode.** With ``deferrable=True`` (default: ``[operators] default_deferrable``)
the task submits, then defers to :class:`~tether.adapters.airflow.trigger.TetherJobTrigger`,
and :meth:`ComponentOperator.execute_complete` writes the job's logs and result.

**Cancellation.** :meth:`ComponentOperator.on_kill` (Airflow calls it on SIGTERM and on
timeouts) cancels the job; a deferred task is cancelled by the trigger's ``on_kill``.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf

from tether.adapters.airflow.links import (
    RESERVED_XCOM_KEYS,
    XCOM_APP_HANDLE,
    XCOM_STATE,
    XCOM_UI_URL,
    TetherJobLink,
)
from tether.adapters.common import (
    ComponentJob,
    JobFailedError,
    JobResult,
    job_key,
    materialize,
    resolve_component,
)
from tether.specs import AppDef, AppState, CfgVal

if TYPE_CHECKING:
    from airflow.sdk import Context

    from tether.runner import Runner

DEFAULT_SCHEDULER = "local_cwd"
"""The scheduler used when the operator names none."""

ORCHESTRATOR = "airflow"

ComponentRef = str | Callable[..., AppDef]
ComponentArgs = Mapping[str, Any] | Sequence[Any] | str | None


def task_job_key(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
    """The job identity of one Airflow task instance (shared by all its tries).

    Args:
        dag_id: The DAG.
        run_id: The DAG run.
        task_id: The task.
        map_index: The map index (-1 or None for an unmapped task).

    Returns:
        The job key.
    """
    return job_key(ORCHESTRATOR, dag_id, run_id, task_id, -1 if map_index is None else map_index)


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


def _check_component(component: Any, task_id: str) -> None:
    if isinstance(component, str):
        if not component.strip():
            raise ValueError(
                f"task {task_id!r}: component is empty; give a name as the CLI takes it "
                "(e.g. 'dist.ddp', 'utils.python', 'path/to/file.py:fn') or a component function"
            )
        return
    if not callable(component):
        raise TypeError(
            f"task {task_id!r}: component must be a name (e.g. 'dist.ddp') or a component "
            f"function returning an AppDef, got {type(component).__name__}"
        )


class ComponentOperator(BaseOperator):
    """Runs a tether component as an Airflow task.

    Args:
        component: A component name as the CLI takes it (``dist.ddp``, ``utils.python``,
            ``path/to/file.py:fn``, ``package.module:fn``) or a component function.
        component_args: Keyword arguments (``{"script": "train.py", "j": "1x2"}``), a list of
            CLI arguments (``["--script", "train.py", "-j", "1x2"]``) or one CLI string.
            Templated.
        scheduler: The scheduler (default ``local_cwd``). Templated, so a DAG param can pick
            it (``"{{ params.scheduler }}"``).
        cfg: Scheduler run options, a dict or a ``k=v,k2=v2`` string. Templated.
        image: Replaces every role's image. Templated.
        env: Added to every role's environment. Templated.
        wait_interval: Seconds between status polls (schedulers that need polling) and the
            trigger's poll interval when deferred.
        deferrable: Free the worker while the job runs (default:
            ``[operators] default_deferrable``).
        stream_logs: Copy the job's logs into the task log.
        **kwargs: :class:`airflow.sdk.BaseOperator` arguments (``task_id``, ``retries``...).
            ``multiple_outputs`` defaults to True: each job output is also its own XCom, so
            ``op.output["accuracy"]`` works.
    """

    template_fields: Sequence[str] = ("component_args", "scheduler", "cfg", "image", "env")
    template_fields_renderers = {"component_args": "json", "cfg": "json", "env": "json"}
    operator_extra_links = (TetherJobLink(),)
    ui_color = "#dbeafe"

    def __init__(
        self,
        *,
        component: ComponentRef,
        component_args: ComponentArgs = None,
        scheduler: str = DEFAULT_SCHEDULER,
        cfg: Mapping[str, Any] | str | None = None,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        wait_interval: float = 5.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        stream_logs: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        _check_component(component, self.task_id)
        if not isinstance(wait_interval, (int, float)) or wait_interval <= 0:
            raise ValueError(
                f"task {self.task_id!r}: wait_interval must be a positive number of seconds, "
                f"got {wait_interval!r}"
            )
        self.component = component
        self.component_args = component_args
        self.scheduler = scheduler
        self.cfg = cfg
        self.image = image
        self.env = env
        self.wait_interval = float(wait_interval)
        self.deferrable = deferrable
        self.stream_logs = stream_logs
        self.job_ui_url: str | None = None
        self._job: ComponentJob | None = None

    # ---- building the job ------------------------------------------------------------------
    @property
    def component_name(self) -> str:
        """The component's display name."""
        return component_display_name(self.component)

    def build_app(self, runner: Runner | None = None) -> AppDef:
        """Materializes the component with the (rendered) arguments and overrides.

        Args:
            runner: Gives ``[component:<name>]`` defaults from ``.tetherconfig``.

        Returns:
            The AppDef.
        """
        return build_component_app(
            self.component, self.component_args, self.image, self.env, runner
        )

    def _new_job(self, context: Context) -> ComponentJob:
        from airflow.sdk.exceptions import AirflowFailException

        from tether.runner import get_runner

        ti = context["ti"]
        runner = get_runner()
        try:
            runner.scheduler_run_opts(str(self.scheduler))  # an unknown scheduler fails here
            app = self.build_app(runner)
            cfg = parse_cfg(runner, str(self.scheduler), self.cfg)
        except (KeyError, ValueError, TypeError) as e:
            runner.close()
            # bad input (unknown scheduler or component, wrong argument or option): retrying
            # cannot help, so the task fails at once
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise AirflowFailException(f"task {self.task_id!r}: {msg}") from e
        except BaseException:
            runner.close()
            raise
        return ComponentJob(
            app,
            str(self.scheduler),
            cfg,
            key=task_job_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index),
            parent_run_id=dag_run_parent_id(ti.dag_id, ti.run_id),
            runner=runner,
        )

    # ---- execution -------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        """Submits (or re-attaches to) the job, follows it and returns its outputs.

        Args:
            context: The task context.

        Returns:
            The job's published outputs (name to value).

        Raises:
            JobFailedError: When the job does not succeed (with the job's message).
        """
        job = self._new_job(context)
        self._job = job
        try:
            handle = job.submit()
            status = job.status()
            if job.reattached:
                self.log.info(
                    "re-attached to tether job %s (%s) launched by an earlier attempt "
                    "(job key %s)", handle, status.state.name if status else "UNKNOWN", job.key,
                )
            else:
                self.log.info("submitted tether job %s (job key %s)", handle, job.key)
            context["ti"].xcom_push(key=XCOM_APP_HANDLE, value=handle)
            if status is not None and status.ui_url:
                self.job_ui_url = status.ui_url
                context["ti"].xcom_push(key=XCOM_UI_URL, value=status.ui_url)
            if self.deferrable and (status is None or not status.is_terminal()):
                self._defer(handle)
            # logs stream on a helper thread while this thread waits in short slices, so a
            # timeout or SIGTERM reaches the task promptly (then on_kill cancels the job)
            result = job.follow(
                sink=self.log.info if self.stream_logs else None, poll_interval=self.wait_interval
            )
        finally:
            # self._job stays set: Airflow calls on_kill() after execute() raised on a timeout
            job.runner.close()
        return self._finish(context, result)

    def _defer(self, app_handle: str) -> None:
        from tether.adapters.airflow.trigger import TetherJobTrigger

        self.log.info("deferring until tether job %s finishes", app_handle)
        self.defer(
            trigger=TetherJobTrigger(app_handle=app_handle, poll_interval=self.wait_interval),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """Finishes a deferred task when the trigger fires: logs, XComs, outputs.

        Args:
            context: The task context.
            event: The trigger's payload (``app_handle``, ``state``, ``msg``, ``ui_url``).

        Returns:
            The job's outputs.

        Raises:
            JobFailedError: When the job does not succeed.
        """
        handle = (event or {}).get("app_handle") or context["ti"].xcom_pull(
            task_ids=self.task_id, key=XCOM_APP_HANDLE, map_indexes=context["ti"].map_index
        )
        if not handle:
            raise RuntimeError(
                f"task {self.task_id!r} resumed without a tether job handle (event: {event!r})"
            )
        job = ComponentJob.attach(str(handle))
        try:
            if self.stream_logs:
                self._copy_logs(job)
            result = job.result()
        finally:
            job.close()
        if result.state == AppState.UNKNOWN and event and event.get("msg"):
            result.msg = str(event["msg"])
        return self._finish(context, result)

    def _copy_logs(self, job: ComponentJob) -> None:
        """Copies the whole log of every replica of a finished job into the task log."""
        try:
            job.stream_logs(self.log.info, follow=False)
        except Exception as e:  # the logs are a convenience: the job's result decides
            self.log.warning("cannot read the logs of %s: %s", job.app_handle, e)

    def _finish(self, context: Context, result: JobResult) -> dict[str, Any]:
        ti = context["ti"]
        self.job_ui_url = result.ui_url
        ti.xcom_push(key=XCOM_STATE, value=result.state.name)
        ti.xcom_push(key=XCOM_UI_URL, value=result.ui_url)
        self.log.info("tether job %s finished %s", result.app_handle, result.state.name)
        if not result.succeeded:
            raise JobFailedError(result)
        clash = RESERVED_XCOM_KEYS & set(result.outputs)
        if clash and self.multiple_outputs:
            self.log.warning(
                "job outputs %s share a name with this task's own XComs and replace them",
                sorted(clash),
            )
        return dict(result.outputs)

    def on_kill(self) -> None:
        """Cancels the running job (Airflow calls this when the task is killed)."""
        job = self._job
        if job is None or job.app_handle is None:
            return
        self.log.info("task killed: cancelling tether job %s", job.app_handle)
        # A fresh runner in a helper thread: the signal may interrupt the main thread inside a
        # scheduler call of the job's own runner.
        from tether.runner import get_runner

        handle = job.app_handle

        def cancel() -> None:
            with get_runner() as r:
                r.cancel(handle)

        t = threading.Thread(target=cancel, name="tether-cancel", daemon=True)
        t.start()
        t.join(timeout=60)

    def dry_run(self) -> None:
        """Logs both layers: this task's arguments and the scheduler's native request."""
        from tether.adapters.airflow.dryrun import render_operator

        self.log.info("%s", render_operator(self))
