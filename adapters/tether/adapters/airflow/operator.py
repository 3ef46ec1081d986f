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
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf

from tether.adapters.airflow.attempts import (
    ENV_TRY_NUMBER,
    LEDGER_KEY,
    ON_FINISH_ACTIONS,
    Action,
    Ledger,
    check_choice,
    check_reattach,
    check_ttl,
    decide,
    kill_cancels_job,
    ti_state,
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
    scheduler_params,
)
from tether.adapters.airflow.labels import add_task_metadata, secret_name
from tether.adapters.airflow.links import (
    RESERVED_XCOM_KEYS,
    XCOM_APP_HANDLE,
    XCOM_STATE,
    XCOM_UI_URL,
    TetherJobLink,
)
from tether.adapters.airflow.rendering import render_operator
from tether.adapters.common import ComponentJob, JobFailedError, JobResult
from tether.specs import AppDef, AppState

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



KILL_READ_TIMEOUT = 5.0
"""Seconds ``on_kill`` waits for the task instance's state and the job's owner."""


class ComponentOperator(BaseOperator):
    """Runs a tether component as an Airflow task.

    Args:
        component: A component name as the CLI takes it (``dist.ddp``, ``utils.python``,
            ``path/to/file.py:fn``, ``package.module:fn``) or a component function. A name is
            templated.
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
            no Job spec, dry-run or task log.
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
        scheduler: str = DEFAULT_SCHEDULER,
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
        self._params: dict[str, Any] = {}
        self.job_ui_url: str | None = None
        self._job: ComponentJob | None = None
        self._store: Any = None
        self._ti_ids: tuple[str, str, str, int, int] | None = None
        self._stopped = False
        self._context: Context | None = None

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

    def _new_job(self, context: Context) -> ComponentJob:
        from airflow.sdk.exceptions import AirflowFailException

        from tether.runner import get_runner

        ti = context["ti"]
        try:
            self._params, conn_cfg = connection_settings(self.conn_id)
        except (KeyError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id!r}: {e}") from e
        runner = get_runner(**self._params)
        try:
            opts = runner.scheduler_run_opts(str(self.scheduler))  # an unknown one fails here
            app = self.build_app(runner)
            cfg = parse_cfg(runner, str(self.scheduler), self.cfg)
            # the connection's defaults and the job TTL, where the scheduler takes them
            merge_run_defaults(cfg, opts, conn_cfg)
            if self.job_ttl is not None:
                if TTL_OPTION not in opts:
                    self.log.warning("scheduler %s has no job TTL: job_ttl is ignored "
                                     "(on_finish_action deletes jobs anywhere)", self.scheduler)
                merge_run_defaults(cfg, opts, {TTL_OPTION: self.job_ttl})
            add_task_metadata(cfg, opts, ti)
        except (KeyError, ValueError, TypeError) as e:
            runner.close()
            # bad input (unknown scheduler or component, wrong argument or option): retrying
            # cannot help, so the task fails at once
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise AirflowFailException(f"task {self.task_id!r}: {msg}") from e
        except BaseException:
            runner.close()
            raise
        for role in app.roles:  # the job carries the try that launched it
            role.env[ENV_TRY_NUMBER] = str(ti.try_number)
        return ComponentJob(
            app,
            str(self.scheduler),
            cfg,
            key=task_job_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number),
            parent_run_id=dag_run_parent_id(ti.dag_id, ti.run_id),
            runner=runner,
        )

    # ---- the ledger (see tether.adapters.airflow.attempts) ----------------------------------
    def _read_ledger(self) -> Ledger | None:
        if self._store is None:
            return None
        return Ledger.from_json(self._store.get(LEDGER_KEY))

    def _write_ledger(self, ledger: Ledger) -> None:
        if self._store is not None:
            self._store.set(LEDGER_KEY, ledger.to_json())

    def _earlier_job(self, job: ComponentJob, try_number: int) -> tuple[Ledger | None, Any]:
        """The ledger of the task instance and the status of its job."""
        runner = job.runner
        ledger = self._read_ledger()
        if ledger is None and self._store is None and self._ti_ids is not None:
            # no task_state_store (Airflow before 3.3): find the newest job of an earlier try
            # by its key; whether its outcome was recorded is unknown, so a finished job
            # counts as recorded
            dag_id, run_id, task_id, map_index, _ = self._ti_ids
            for t in range(try_number - 1, 0, -1):
                key = task_job_key(dag_id, run_id, task_id, map_index, t)
                found = runner.find_job(job.scheduler, key)
                if found is not None:
                    return Ledger(key, t, t, job.scheduler, found.app_handle, recorded=True), (
                        found.status
                    )
            return None, None
        if ledger is None:
            return None, None
        try:
            if ledger.app_handle is None:  # the try died while submitting: find it by its key
                found = runner.find_job(ledger.scheduler or job.scheduler, ledger.job_key)
                if found is None:
                    return ledger, None
                ledger.app_handle = found.app_handle
                return ledger, found.status
            return ledger, runner.status(ledger.app_handle)
        except Exception as e:  # e.g. the earlier job's scheduler is no longer configured
            self.log.warning("cannot look up the job of try %s: %s", ledger.launched_by, e)
            return ledger, None

    def _start(self, job: ComponentJob, try_number: int) -> str:
        """Re-attaches to the earlier try's job or launches a new one (records the ledger)."""
        ledger, status = self._earlier_job(job, try_number)
        decision = decide(ledger, status, self.reattach, try_number)
        if decision.cancel_previous:
            self.log.info("cancelling tether job %s of an earlier try (%s)",
                          decision.cancel_previous, decision.reason)
            job.runner.cancel(decision.cancel_previous)
        if decision.action == Action.ATTACH and ledger is not None and ledger.app_handle:
            job.adopt(ledger.app_handle)
            ledger.owner = try_number
            self._write_ledger(ledger)
            self.log.info(
                "re-attached to tether job %s (%s) launched by try %s: %s",
                ledger.app_handle, status.state.name if status else "UNKNOWN",
                ledger.launched_by, decision.reason,
            )
            return ledger.app_handle
        assert job.key is not None
        if ledger is not None and ledger.extra.get("secret"):
            self._cleanup_secret(job.runner, ledger)  # the earlier job's, now unused
        new = Ledger(job.key, try_number, try_number, job.scheduler)
        if self.secret_env:
            new.extra["secret"] = self._hand_over_secrets(job)
        self._write_ledger(new)  # before submitting: a crash in between leaves the key
        handle = job.launch()
        new.app_handle = handle
        self._write_ledger(new)
        self.log.info("submitted tether job %s (job key %s, try %s; %s)",
                      handle, job.key, try_number, decision.reason)
        return handle

    def _record(self, result: JobResult) -> None:
        """Marks the ledger's job as recorded (this try decided the task with its outcome),
        then cleans up: the job's secret, and the job itself per ``on_finish_action``."""
        ledger: Ledger | None = None
        try:
            ledger = self._read_ledger()
            if ledger is not None and ledger.app_handle == result.app_handle:
                ledger.recorded, ledger.state = True, result.state.name
                self._write_ledger(ledger)
        except Exception as e:  # the result decides the task; the ledger is best effort here
            self.log.warning("cannot record the job's outcome in task_state_store: %s", e)
        if not result.state.is_terminal():
            return
        with self._runner() as runner:
            if ledger is not None and ledger.extra.get("secret"):
                self._cleanup_secret(runner, ledger)
            action = self.on_finish_action
            if action == "delete" or (action == "delete_succeeded" and result.succeeded):
                self.log.info("deleting tether job %s (on_finish_action=%s)",
                              result.app_handle, action)
                try:
                    runner.delete(result.app_handle)
                except Exception as e:
                    self.log.warning("cannot delete tether job %s: %s", result.app_handle, e)

    def _runner(self) -> Runner:
        from tether.runner import get_runner

        return get_runner(**self._params)

    def _hand_over_secrets(self, job: ComponentJob) -> str:
        """Stores ``secret_env`` in a secret of the scheduler; the job gets references."""
        from airflow.sdk.exceptions import AirflowFailException

        from tether.specs import SecretRef

        assert job.key is not None and self._context is not None
        values = self.render_template(self.secret_env, self._context)
        if not isinstance(values, Mapping):
            raise AirflowFailException(
                f"task {self.task_id!r}: secret_env must be a mapping of env name to value"
            )
        values = {str(k): str(v) for k, v in values.items()}
        _mask(values.values())
        name = secret_name(job.key)
        try:
            job.runner.put_secret(job.scheduler, name, values, job.cfg)
        except NotImplementedError as e:
            raise AirflowFailException(f"task {self.task_id!r}: secret_env: {e}") from e
        for role in job.app.roles:
            for var in values:
                role.env.pop(var, None)
                role.secrets[var] = SecretRef(name, var)
        self.log.info("secret_env %s handed to the job as secret %s", sorted(values), name)
        return name

    def _cleanup_secret(self, runner: Runner, ledger: Ledger) -> None:
        name = str(ledger.extra.get("secret"))
        try:
            cfg = parse_cfg(runner, ledger.scheduler or str(self.scheduler), self.cfg)
            runner.delete_secret(ledger.scheduler or str(self.scheduler), name, cfg)
            self.log.info("deleted secret %s of tether job %s", name, ledger.app_handle)
        except Exception as e:
            self.log.warning("cannot delete secret %s: %s", name, e)

    def _bind(self, context: Context) -> int:
        ti = context["ti"]
        self._context = context
        self._store = context.get("task_state_store")
        if self.conn_id and not self._params:
            try:
                self._params = scheduler_params(self.conn_id)
            except Exception as e:
                self.log.warning("cannot read connection %s: %s", self.conn_id, e)
        mi = -1 if ti.map_index is None else int(ti.map_index)
        self._ti_ids = (ti.dag_id, ti.run_id, ti.task_id, mi, int(ti.try_number))
        return int(ti.try_number)

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
        from airflow.sdk.exceptions import AirflowTaskTimeout

        try_number = self._bind(context)
        job = self._new_job(context)
        self._job = job
        try:
            handle = self._start(job, try_number)
            status = job.status()
            context["ti"].xcom_push(key=XCOM_APP_HANDLE, value=handle)
            if status is not None and status.ui_url:
                self.job_ui_url = status.ui_url
                context["ti"].xcom_push(key=XCOM_UI_URL, value=status.ui_url)
            if self.deferrable and (status is None or not status.is_terminal()):
                self._defer(handle, context, try_number)
            # logs stream on a helper thread while this thread waits in short slices, so a
            # timeout or SIGTERM reaches the task promptly
            try:
                result = job.follow(
                    sink=self.log.info if self.stream_logs else None,
                    poll_interval=self.wait_interval,
                )
            except AirflowTaskTimeout:
                self._stopped = True
                self.log.error("execution_timeout reached: cancelling tether job %s", handle)
                stopped = job.cancel_and_wait(timeout=30.0, poll_interval=0.2)
                if stopped is not None:
                    self._record(stopped)
                raise
        finally:
            # self._job stays set: Airflow calls on_kill() after execute() raised on a timeout
            job.runner.close()
        return self._finish(context, result)

    def _defer(self, app_handle: str, context: Context, try_number: int) -> None:
        from tether.adapters.airflow.trigger import TetherJobTrigger

        ti = context["ti"]
        deadline = self._deadline(context)
        self.log.info("deferring until tether job %s finishes", app_handle)
        # Airflow does not apply execution_timeout to deferred time: the trigger cancels the
        # job at the deadline itself; the defer timeout is a backstop (see resume_execution)
        backstop = (
            dt.timedelta(seconds=max(deadline - time.time(), 0.0) + 60.0 + self.wait_interval)
            if deadline is not None else None
        )
        self.defer(
            trigger=TetherJobTrigger(
                app_handle=app_handle,
                poll_interval=self.wait_interval,
                deadline=deadline,
                stream_logs=self.stream_logs,
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=-1 if ti.map_index is None else int(ti.map_index),
                try_number=try_number,
                conn_id=self.conn_id,
                secret=self._secret_of(app_handle),
            ),
            method_name="execute_complete",
            timeout=backstop,
        )

    def _secret_of(self, app_handle: str) -> dict[str, Any] | None:
        """Where the job's ``secret_env`` secret lives, for the trigger to delete on a kill."""
        ledger = self._read_ledger()
        if ledger is None or ledger.app_handle != app_handle or not ledger.extra.get("secret"):
            return None
        return {"scheduler": ledger.scheduler or str(self.scheduler),
                "name": str(ledger.extra["secret"]), "cfg": self.cfg}

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

        self._bind(context)
        event = event or {}
        handle = event.get("app_handle") or self._handle_from_xcom(context)
        if not handle:
            raise RuntimeError(
                f"task {self.task_id!r} resumed without a tether job handle (event: {event!r})"
            )
        job = ComponentJob.attach(str(handle), runner=self._runner())
        try:
            if self.stream_logs:
                self._copy_logs(job, event.get("log_cursor"))
            result = job.result()
        finally:
            job.runner.close()
        if result.state == AppState.UNKNOWN and event.get("msg"):
            result.msg = str(event["msg"])
        if event.get("timed_out"):
            self._record(result)
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
            self._bind(context)
            handle = self._handle_from_xcom(context)
            if handle:
                self.log.error("the deferral failed (%s): cancelling tether job %s",
                               (next_kwargs or {}).get("error"), handle)
                with self._runner() as runner:
                    runner.cancel(str(handle))
        return super().resume_execution(next_method, next_kwargs, context)

    def _copy_logs(self, job: ComponentJob, cursor: Any = None) -> None:
        """Copies the lines of a finished job the trigger did not stream into the task log."""
        from tether.adapters.airflow.trigger import LogCursor

        seen = LogCursor.from_json(cursor)
        try:
            for line in seen.new_lines(job.runner, str(job.app_handle), follow=False):
                self.log.info("%s", line)
        except Exception as e:  # the logs are a convenience: the job's result decides
            self.log.warning("cannot read the logs of %s: %s", job.app_handle, e)

    def _finish(self, context: Context, result: JobResult) -> dict[str, Any]:
        ti = context["ti"]
        self.job_ui_url = result.ui_url
        ti.xcom_push(key=XCOM_STATE, value=result.state.name)
        ti.xcom_push(key=XCOM_UI_URL, value=result.ui_url)
        self.log.info("tether job %s finished %s", result.app_handle, result.state.name)
        self._record(result)
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
        job = self._job
        if job is None or job.app_handle is None or self._stopped:
            return
        handle = job.app_handle
        ids = self._ti_ids
        # Who owns the job and why the task stops come from Airflow's supervisor channel. Read
        # in a helper thread with a bounded wait: the signal may have interrupted this thread
        # inside a call on that channel, which holds its lock; then the facts stay unknown.
        facts: dict[str, Any] = {}

        def read() -> None:
            try:
                found = self._read_ledger()
                facts["ledger"] = found
            except Exception as e:
                self.log.warning("cannot read the job's owner: %s", e)
            for _ in range(3):  # a read can fail while the channel is busy: try again
                if ids is None:
                    break
                facts["state"] = ti_state(*ids[:4])
                if facts["state"] != "unknown":
                    break
                time.sleep(0.2)

        reader = threading.Thread(target=read, name="tether-kill-facts", daemon=True)
        reader.start()
        reader.join(timeout=KILL_READ_TIMEOUT)
        ledger: Ledger | None = facts.get("ledger")
        owner = ledger.owner if ledger and ledger.app_handle == handle else None
        state: str | None = facts.get("state", "unknown")
        cancel, reason = kill_cancels_job(state, owner, ids[4] if ids else 0)
        if not cancel:
            self.log.info("task killed: leaving tether job %s running (%s)", handle, reason)
            return
        self.log.info("task killed: cancelling tether job %s (%s)", handle, reason)

        # A helper thread with a fresh runner: the signal may have interrupted the main thread
        # inside a call of the job's own runner.
        def stop() -> None:
            with self._runner() as r:
                r.cancel(handle)
                if ledger is not None and ledger.app_handle == handle and ledger.extra.get(
                    "secret"
                ):
                    self._cleanup_secret(r, ledger)  # no later try may come to do it

        t = threading.Thread(target=stop, name="tether-cancel", daemon=True)
        t.start()
        t.join(timeout=60)

    def dry_run(self) -> None:
        """Logs both layers: this task's arguments and the scheduler's native request."""
        self.log.info("%s", render_operator(self))


def _mask(values: Any) -> None:
    """Registers values with Airflow's secrets masker (task logs show ``***``)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    for v in values:
        if v:
            mask_secret(v)
