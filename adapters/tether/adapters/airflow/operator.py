"""``ComponentOperator``: a tether component as one Airflow task.

The task materializes the component's AppDef, submits it through the Runner (or re-attaches
to the job an earlier try of the same task instance launched), streams every replica's log
into the task log (``role/replica line``), waits, and returns the job's published outputs. It
pushes the XComs ``app_handle`` (right after submission), ``state`` and ``ui_url``; a job that
does not succeed fails the task with the job's own message.

**Tries and re-attaching.** Each try either re-attaches to the job of an earlier try (still
running, or succeeded without its outcome recorded because the worker died) or launches a
new one (a retry after a failed job, a clear after a finished one); ``reattach`` changes the
rule. See :mod:`tether.adapters.airflow.attempts`.

**Deferrable mode.** With ``deferrable=True`` (default: ``[operators] default_deferrable``)
the task submits, then defers to :class:`~tether.adapters.airflow.trigger.TetherJobTrigger`,
which streams the job's logs into the task log and fires when it ends;
:meth:`ComponentOperator.execute_complete` records the result.

**Timeouts and kills.** ``execution_timeout`` cancels the job in both modes and fails the task
with a timeout error. :meth:`ComponentOperator.on_kill` cancels the job only when the killed
try owns it and the task was stopped (mark failed/success, worker shutdown), not when it was
cleared (the next try re-attaches).

This module holds the operator, a thin shell: its arguments, building the try's
:class:`~tether.adapters.common.JobSession`, following it (here or deferred to the trigger)
and the task's XComs and result. It holds, for each try, the session and a
:class:`~tether.adapters.airflow.lifecycle.TryLifecycle` (starting, recording and cleaning
up the try's job), and cancels on a kill with :mod:`tether.adapters.airflow.kill`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf

from tether.adapters.airflow.attempts import (
    ENV_TRY_NUMBER,
    ON_FINISH_ACTIONS,
    check_choice,
    check_reattach,
    check_ttl,
)
from tether.adapters.airflow.building import (
    DEFAULT_SCHEDULER,
    ORCHESTRATOR,
    TTL_OPTION,
    ComponentArgs,
    ComponentFunction,
    ComponentRef,
    build_component_app,
    check_component,
    component_display_name,
    dag_run_parent_id,
    normalize_component_args,
    parse_cfg,
    task_job_key,
)
from tether.adapters.airflow.connections import (
    connection_settings,
    merge_run_defaults,
)
from tether.adapters.airflow.kill import cancel_on_kill
from tether.adapters.airflow.labels import add_task_metadata
from tether.adapters.airflow.lifecycle import TryLifecycle, TrySettings
from tether.adapters.airflow.links import (
    RESERVED_XCOM_KEYS,
    XCOM_APP_HANDLE,
    XCOM_PROGRESS,
    XCOM_STATE,
    XCOM_UI_URL,
    TetherJobLink,
    progress_value,
    publish_link,
)
from tether.adapters.airflow.rendering import render_operator
from tether.adapters.airflow.trigger import XCOM_LOG_CURSOR
from tether.adapters.common import JobFailedError, JobResult, JobSession, LogCursor
from tether.adapters.common.candidates import (
    SchedulerListError,
    check_candidates,
    scheduler_list,
    union_opts,
)
from tether.specs import AppDef, AppState, AppStatus
from tether.tracker.progress import Progress

if TYPE_CHECKING:
    from airflow.sdk import Context

    from tether.runner import Runner

__all__ = [
    "DEFAULT_SCHEDULER",
    "ORCHESTRATOR",
    "ComponentArgs",
    "ComponentFunction",
    "ComponentOperator",
    "ComponentRef",
    "build_component_app",
    "component_display_name",
    "dag_run_parent_id",
    "normalize_component_args",
    "parse_cfg",
    "task_job_key",
]


class ComponentOperator(BaseOperator):
    """Runs a tether component as an Airflow task.

    Args:
        component: A component name as the CLI takes it (``dist.ddp``, ``utils.python``,
            ``path/to/file.py:fn``, ``package.module:fn``) or a component function. A name is
            templated.
        component_args: Keyword arguments (``{"script": "train.py", "j": "1x2"}``), a list of
            CLI arguments (``["--script", "train.py", "-j", "1x2"]``) or one CLI string.
            Templated.
        scheduler: The scheduler (default ``local_cwd``), or the schedulers to try in order
            (``["kubernetes", "local_cwd"]`` or ``"kubernetes,local_cwd"``): the job then
            runs as one logical job that moves to the next candidate when one refuses it for
            capacity (see ``docs/recovery.md``). Templated, so a DAG param can pick it
            (``"{{ params.scheduler }}"``).
        cfg: Scheduler run options, a dict or a ``k=v,k2=v2`` string. Templated. With several
            schedulers each gets the options it declares; one that none declares, or that a
            candidate would not accept, fails the task before anything is submitted.
        image: Replaces every role's image. Templated.
        env: Added to every role's environment. Templated.
        wait_interval: Seconds between status polls (schedulers that need polling) and the
            trigger's poll interval when deferred.
        deferrable: Free the worker while the job runs (default:
            ``[operators] default_deferrable``).
        stream_logs: Copy the job's logs into the task log (live, in both modes).
        reattach: Which job a try runs: ``auto`` (default) re-attaches to a job of an earlier
            try that still runs, or succeeded without its outcome being recorded, and launches
            a new one otherwise (a cleared task runs anew); ``always`` also re-uses a job that
            succeeded (a clear returns its result); ``never`` launches a new job every try.
        conn_id: An Airflow Connection naming the cluster (see
            :mod:`tether.adapters.airflow.connections`); default: the environment's.
        secret_env: Environment variables whose values are secrets, e.g.
            ``{"DB_PASSWORD": "{{ conn.warehouse.password }}"}`` (rendered when the task runs,
            never stored as a rendered field, masked in logs). The task stores them in a
            secret the scheduler holds (a Kubernetes Secret it creates and deletes when the job
            is done) and the job reads them by reference (``secretKeyRef``), so they appear in
            no Job spec, dry-run or task log. With a failover list every candidate gets the
            secret (a candidate that holds none fails the task before anything is submitted).
        on_finish_action: What happens to the job once the task recorded its outcome:
            ``keep`` (default), ``delete_succeeded`` (delete it if it succeeded) or ``delete``.
        job_ttl: Seconds (or a timedelta) after the job finished before the backend itself
            removes it, on schedulers with a TTL run option (Kubernetes:
            ``ttl_seconds_after_finished``, the Jobs' ``ttlSecondsAfterFinished``); the task's
            ``cfg`` wins. Unlike ``on_finish_action`` it also cleans up after a worker that
            died. A later try (a clear) finds no job and launches a new one.
        **kwargs: :class:`airflow.sdk.BaseOperator` arguments (``task_id``, ``retries``,
            ``execution_timeout``...). ``multiple_outputs`` defaults to True: each job output
            is also its own XCom, so ``op.output["accuracy"]`` works.
    """

    template_fields: Sequence[str] = (
        "component", "component_args", "scheduler", "cfg", "image", "env",
    )
    template_fields_renderers = {"component_args": "json", "cfg": "json", "env": "json"}
    operator_extra_links = (TetherJobLink(),)
    ui_color = "#dbeafe"

    def __init__(
        self,
        *,
        component: ComponentRef,
        component_args: ComponentArgs = None,
        scheduler: str | Sequence[str] = DEFAULT_SCHEDULER,
        cfg: Mapping[str, Any] | str | None = None,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        wait_interval: float = 5.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        stream_logs: bool = True,
        reattach: str = "auto",
        conn_id: str | None = None,
        secret_env: Mapping[str, str] | None = None,
        on_finish_action: str = "keep",
        job_ttl: int | float | dt.timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        check_component(component, self.task_id)
        if not isinstance(wait_interval, (int, float)) or wait_interval <= 0:
            raise ValueError(
                f"task {self.task_id!r}: wait_interval must be a positive number of seconds, "
                f"got {wait_interval!r}"
            )
        # a function is kept in a holder: Airflow calls callable template fields
        self.component: str | ComponentFunction = (
            component if isinstance(component, str) else ComponentFunction(component)
        )
        self.component_args = component_args
        self.scheduler = scheduler
        self.cfg = cfg
        self.image = image
        self.env = env
        self.wait_interval = float(wait_interval)
        self.deferrable = deferrable
        self.stream_logs = stream_logs
        self.reattach = check_reattach(reattach, self.task_id)
        self.conn_id = conn_id
        self.secret_env = dict(secret_env or {})
        self.on_finish_action = check_choice(
            "on_finish_action", on_finish_action, ON_FINISH_ACTIONS, self.task_id
        )
        self.job_ttl = check_ttl(job_ttl, self.task_id)
        self.job_ui_url: str | None = None
        self.job_ui_url_known = False  # whether this process read the job's status
        self._try: TryLifecycle | None = None
        self._session: JobSession | None = None
        self._stopped = False

    # ---- building the job ------------------------------------------------------------------
    @property
    def component_name(self) -> str:
        """The component's display name."""
        return component_display_name(self.component_ref)

    @property
    def component_ref(self) -> ComponentRef:
        """The component: its (rendered) name, or the function."""
        c = self.component
        return c.fn if isinstance(c, ComponentFunction) else c

    def build_app(self, runner: Runner | None = None) -> AppDef:
        """Materializes the component with the (rendered) arguments and overrides.

        Args:
            runner: Gives ``[component:<name>]`` defaults from ``.tetherconfig``.

        Returns:
            The AppDef.
        """
        return build_component_app(
            self.component_ref, self.component_args, self.image, self.env, runner
        )

    def _settings(self) -> TrySettings:
        return TrySettings(
            task_id=self.task_id, scheduler=self._first_scheduler(), cfg=self.cfg,
            reattach=self.reattach, secret_env=self.secret_env,
            on_finish_action=self.on_finish_action, conn_id=self.conn_id,
        )

    def _first_scheduler(self) -> str:
        """The first candidate (where the try's ledger, secrets and lookups go)."""
        try:
            return scheduler_list(self.scheduler)[0]
        except SchedulerListError:  # reported, naming the task, when the try starts
            return str(self.scheduler)

    def _bind(self, context: Context, params: dict[str, Any] | None = None) -> TryLifecycle:
        """Makes the try's lifecycle (the operator's state for this try)."""
        self._try = TryLifecycle(self._settings(), context, self.log, self.render_template,
                                 params)
        return self._try

    def _new_session(self, context: Context) -> tuple[JobSession, dict[str, Any]]:
        """The try's job session, and the runner parameters of the Connection."""
        from airflow.sdk.exceptions import AirflowFailException

        from tether.runner import get_runner

        try:
            params, conn_cfg = connection_settings(self.conn_id)
        except (KeyError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id!r}: {e}") from e
        runner = get_runner(**params)
        try:
            app, cfg = self._job_spec(runner, context, conn_cfg)
        except (KeyError, ValueError, TypeError) as e:
            runner.close()
            # bad input (unknown scheduler or component, wrong argument or option): retrying
            # cannot help, so the task fails at once
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise AirflowFailException(f"task {self.task_id!r}: {msg}") from e
        except BaseException:
            runner.close()
            raise
        ti = context["ti"]
        session = JobSession(
            app, scheduler_list(self.scheduler), cfg,
            key=task_job_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number),
            parent_run_id=dag_run_parent_id(ti.dag_id, ti.run_id), runner=runner,
        )
        return session, params

    def _job_spec(
        self, runner: Runner, context: Context, conn_cfg: Mapping[str, Any]
    ) -> tuple[AppDef, dict[str, Any]]:
        """The try's AppDef and run options (the Connection's defaults, the TTL, labels)."""
        ti = context["ti"]
        schedulers = scheduler_list(self.scheduler)
        check_candidates(runner, schedulers, {})  # an unknown one fails here
        opts = union_opts(runner, schedulers)
        app = self.build_app(runner)
        cfg = (dict(opts.cfg_from_str(self.cfg)) if isinstance(self.cfg, str) and self.cfg
               else parse_cfg(runner, schedulers[0], self.cfg))
        merge_run_defaults(cfg, opts, conn_cfg)
        if self.job_ttl is not None:
            if TTL_OPTION not in opts:
                self.log.warning("scheduler %s has no job TTL: job_ttl is ignored "
                                 "(on_finish_action deletes jobs anywhere)", self.scheduler)
            merge_run_defaults(cfg, opts, {TTL_OPTION: self.job_ttl})
        add_task_metadata(cfg, opts, ti)
        check_candidates(runner, schedulers, cfg, app=app)  # each takes what it declares
        for role in app.roles:  # the job carries the try that launched it
            role.env[ENV_TRY_NUMBER] = str(ti.try_number)
        return app, cfg

    def _deadline(self, context: Context) -> float | None:
        """The try's execution_timeout as an absolute time (seconds since the epoch)."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        begun = start.timestamp() if isinstance(start, dt.datetime) else time.time()
        return begun + self.execution_timeout.total_seconds()

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
        session, params = self._new_session(context)
        lifecycle = self._bind(context, params)
        self._session = session
        # self._session stays set: Airflow calls on_kill() after execute() raised on a timeout
        with session.runner:
            handle = lifecycle.start(session)
            status = self._publish_start(context, session)
            if self.deferrable and (status is None or not status.is_terminal()):
                self._defer(handle, context, lifecycle)
            result = self._follow(session, lifecycle, context["ti"])
        return self._finish(context, result)

    def _show_progress(self, ti: Any, progress: Progress) -> None:
        """Writes a progress report of the job into the task log and the XCom
        ``tether_progress`` (replacing the report before it)."""
        self.log.info("tether progress: %s", progress.format())
        ti.xcom_push(key=XCOM_PROGRESS, value=progress_value(progress))

    def _publish_start(self, context: Context, session: JobSession) -> AppStatus | None:
        """Pushes the ``app_handle`` XCom, and ``ui_url`` when the job has a UI.

        Returns:
            The job's status.
        """
        ti = context["ti"]
        status = session.status()
        ti.xcom_push(key=XCOM_APP_HANDLE, value=session.app_handle)
        self.job_ui_url_known = True
        if status is not None and status.ui_url:
            self.job_ui_url = status.ui_url
            ti.xcom_push(key=XCOM_UI_URL, value=status.ui_url)
            publish_link(ti, status.ui_url)  # the task's button works while the job runs
        return status

    def _follow(self, session: JobSession, lifecycle: TryLifecycle, ti: Any) -> JobResult:
        """Follows the job here; the execution_timeout cancels it."""
        from airflow.sdk.exceptions import AirflowTaskTimeout

        # logs stream on a helper thread while this thread waits in short slices, so a
        # timeout or SIGTERM reaches the task promptly
        try:
            return session.follow(sink=self.log.info if self.stream_logs else None,
                                  poll_interval=self.wait_interval,
                                  on_progress=lambda p: self._show_progress(ti, p))
        except AirflowTaskTimeout:
            self._stopped = True
            self.log.error("execution_timeout reached: cancelling tether job %s",
                           session.app_handle)
            stopped = session.cancel_and_wait(timeout=30.0, poll_interval=0.2)
            if stopped is not None:
                lifecycle.record(stopped)
            raise

    def _defer(self, app_handle: str, context: Context, lifecycle: TryLifecycle) -> None:
        from tether.adapters.airflow.trigger import TetherJobTrigger

        ti = context["ti"]
        deadline = self._deadline(context)
        self.log.info("deferring until tether job %s finishes", app_handle)
        if self.stream_logs:  # the trigger reads it: an XCom that exists logs no "not found"
            ti.xcom_push(key=XCOM_LOG_CURSOR, value={})
        # Airflow does not apply execution_timeout to deferred time: the trigger cancels the
        # job at the deadline itself; the defer timeout is a backstop (see resume_execution)
        backstop = (
            dt.timedelta(seconds=max(deadline - time.time(), 0.0) + 60.0 + self.wait_interval)
            if deadline is not None else None
        )
        dag_id, run_id, task_id, map_index = lifecycle.ti_ids
        self.defer(
            trigger=TetherJobTrigger(
                app_handle=app_handle, poll_interval=self.wait_interval, deadline=deadline,
                stream_logs=self.stream_logs, dag_id=dag_id, run_id=run_id, task_id=task_id,
                map_index=map_index, try_number=lifecycle.try_number, conn_id=self.conn_id,
                secret=lifecycle.secret_of(app_handle),
            ),
            method_name="execute_complete",
            timeout=backstop,
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """Finishes a deferred task when the trigger fires: logs, XComs, outputs.

        Args:
            context: The task context.
            event: The trigger's payload (``app_handle``, ``state``, ``msg``, ``ui_url``,
                ``timed_out``, ``log_cursor``).

        Returns:
            The job's outputs.

        Raises:
            JobFailedError: When the job does not succeed.
            AirflowTaskTimeout: When execution_timeout was reached (the job was cancelled).
        """
        from airflow.sdk.exceptions import AirflowTaskTimeout

        lifecycle = self._bind(context)
        event = event or {}
        handle = event.get("app_handle") or self._handle_from_xcom(context)
        if not handle:
            raise RuntimeError(
                f"task {self.task_id!r} resumed without a tether job handle (event: {event!r})"
            )
        with lifecycle.runner() as runner:
            session = JobSession.attach(str(handle), runner=runner)
            if self.stream_logs:
                self._copy_logs(session, event.get("log_cursor"))
            result = session.result()
        if result.state == AppState.UNKNOWN and event.get("msg"):
            result.msg = str(event["msg"])
        if event.get("timed_out"):
            lifecycle.record(result)
            raise AirflowTaskTimeout(
                f"execution_timeout ({self.execution_timeout}) reached: tether job {handle} "
                f"was cancelled ({result.state.name})"
            )
        return self._finish(context, result)

    def _handle_from_xcom(self, context: Context) -> Any:
        ti = context["ti"]
        return ti.xcom_pull(task_ids=self.task_id, key=XCOM_APP_HANDLE, map_indexes=ti.map_index)

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context
    ) -> Any:
        """Cancels the job before a deferral that failed (e.g. its timeout) fails the task."""
        if next_method == "__fail__":
            lifecycle = self._bind(context)
            handle = self._handle_from_xcom(context)
            if handle:
                self.log.error("the deferral failed (%s): cancelling tether job %s",
                               (next_kwargs or {}).get("error"), handle)
                with lifecycle.runner() as runner:
                    runner.cancel(str(handle))
        return super().resume_execution(next_method, next_kwargs, context)

    def _copy_logs(self, session: JobSession, cursor: Any = None) -> None:
        """Copies the lines of a finished job the trigger did not stream into the task log."""
        try:
            session.stream_logs(lambda line: self.log.info("%s", line), follow=False,
                                cursor=LogCursor.from_json(cursor))
        except Exception as e:  # the logs are a convenience: the job's result decides
            self.log.warning("cannot read the logs of %s: %s", session.app_handle, e)

    def _finish(self, context: Context, result: JobResult) -> dict[str, Any]:
        ti = context["ti"]
        self.job_ui_url, self.job_ui_url_known = result.ui_url, True
        ti.xcom_push(key=XCOM_STATE, value=result.state.name)
        ti.xcom_push(key=XCOM_UI_URL, value=result.ui_url)
        if result.progress is not None:
            ti.xcom_push(key=XCOM_PROGRESS, value=progress_value(
                Progress.from_dict(result.progress)))
        self.log.info("tether job %s finished %s", result.app_handle, result.state.name)
        if self._try is not None:
            self._try.record(result)
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
        """Cancels the job when the killed try owns it and the task was stopped, not cleared.

        Airflow calls this on SIGTERM (mark failed or success, clear, worker shutdown) and after
        an execution timeout (then :meth:`execute` has cancelled the job already).
        """
        session, lifecycle = self._session, self._try
        if session is None or lifecycle is None or session.app_handle is None or self._stopped:
            return
        cancel_on_kill(lifecycle, session.app_handle)

    def dry_run(self) -> None:
        """Logs both layers: this task's arguments and the scheduler's native request."""
        self.log.info("%s", render_operator(self))
