"""A try's job, from start to cleanup: the operator's side of the tries ledger.

:class:`JobLifecycle` is what :class:`~tether.adapters.airflow.operator.ComponentOperator`
does around the job of one try: bind the try's context (its ``task_state_store``, its ids,
its Connection), start the job (re-attach to an earlier try's job or launch a new one, per
the rules of :mod:`tether.adapters.airflow.attempts`), hand ``secret_env`` over as a secret
the scheduler holds, record the job's outcome in the ledger, and clean up after it (the
secret; the job itself per ``on_finish_action``). The operator inherits it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.adapters.airflow.attempts import LEDGER_KEY, Action, Ledger, decide
from tether.adapters.airflow.building import parse_cfg, task_job_key
from tether.adapters.airflow.connections import scheduler_params
from tether.adapters.airflow.labels import secret_name
from tether.adapters.common import ComponentJob, JobResult

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from tether.runner import Runner

    _Base = BaseOperator
else:
    _Base = object


class JobLifecycle(_Base):
    """Starts, records and cleans up the job of a try (a mixin of the operator).

    Attributes it reads are the operator's: ``scheduler``, ``cfg``, ``reattach``,
    ``secret_env``, ``on_finish_action`` and the per-try state set by :meth:`_bind`.
    """

    scheduler: str
    cfg: Mapping[str, Any] | str | None
    reattach: str
    conn_id: str | None
    secret_env: dict[str, Any]
    on_finish_action: str
    _params: dict[str, Any]
    _store: Any
    _ti_ids: tuple[str, str, str, int, int] | None
    _context: Context | None

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


def _mask(values: Any) -> None:
    """Registers values with Airflow's secrets masker (task logs show ``***``)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    for v in values:
        if v:
            mask_secret(v)
