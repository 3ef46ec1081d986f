"""A try's job, from start to cleanup: the operator's side of the tries ledger.

:class:`TryLifecycle` is the collaborator a
:class:`~tether.adapters.airflow.operator.ComponentOperator` makes for each try (and for each
resumption of a deferred try). It is given what it needs, never reads the operator: the try's
context (its ``task_state_store``, its ids, its Connection's settings) and the operator's
choices (:class:`TrySettings`). It starts the try's job session (re-attach to an earlier
try's job or launch a new one, per :mod:`tether.adapters.airflow.attempts`), hands
``secret_env`` over as a secret the scheduler holds, records the job's outcome in the
ledger, and cleans up after it (the secret; the job itself per ``on_finish_action``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.adapters.airflow.attempts import LEDGER_KEY, Ledger, earlier_job
from tether.adapters.airflow.building import parse_cfg, task_job_key
from tether.adapters.airflow.connections import scheduler_params
from tether.adapters.airflow.labels import secret_name
from tether.adapters.common import JobResult, JobSession
from tether.runner.reattach import Reattach

if TYPE_CHECKING:
    from airflow.sdk import Context

    from tether.runner import Runner
    from tether.specs import AppStatus


@dataclass(frozen=True)
class TrySettings:
    """What the operator chose for its tries' jobs.

    Attributes:
        task_id: The task (for messages).
        scheduler: The (rendered) scheduler.
        cfg: The (rendered) run options.
        reattach: ``auto``, ``always`` or ``never``.
        secret_env: Environment variables whose values are secrets (unrendered).
        on_finish_action: ``keep``, ``delete_succeeded`` or ``delete``.
        conn_id: The Airflow Connection naming the cluster.
    """

    task_id: str
    scheduler: str
    cfg: Mapping[str, Any] | str | None
    reattach: str
    secret_env: dict[str, Any] = field(default_factory=dict)
    on_finish_action: str = "keep"
    conn_id: str | None = None


class TryLifecycle:
    """Starts, records and cleans up the job of one try.

    Args:
        settings: The operator's choices.
        context: The try's task context.
        log: The task log.
        render: Renders a templated value in ``context`` (the operator's ``render_template``).
        params: Runner parameters from the Connection (default: read from ``conn_id``).
    """

    def __init__(
        self,
        settings: TrySettings,
        context: Context,
        log: Any,
        render: Callable[[Any, Context], Any],
        params: dict[str, Any] | None = None,
    ) -> None:
        ti = context["ti"]
        self.settings = settings
        self.context = context
        self.log = log
        self._render = render
        self.store: Any = context.get("task_state_store")
        self.try_number = int(ti.try_number)
        mi = -1 if ti.map_index is None else int(ti.map_index)
        self.ti_ids: tuple[str, str, str, int] = (ti.dag_id, ti.run_id, ti.task_id, mi)
        self.params = params if params is not None else self._connection_params()

    def _connection_params(self) -> dict[str, Any]:
        if not self.settings.conn_id:
            return {}
        try:
            return scheduler_params(self.settings.conn_id)
        except Exception as e:
            self.log.warning("cannot read connection %s: %s", self.settings.conn_id, e)
            return {}

    def runner(self) -> Runner:
        """A new runner for the try's cluster (the caller closes it)."""
        from tether.runner import get_runner

        return get_runner(**self.params)

    # ---- the ledger (see tether.adapters.airflow.attempts) ----------------------------------
    def read_ledger(self) -> Ledger | None:
        """The task instance's ledger (None without one or without a store)."""
        if self.store is None:
            return None
        return Ledger.from_json(self.store.get(LEDGER_KEY))

    def write_ledger(self, ledger: Ledger) -> None:
        """Stores the ledger (nothing without a store).

        Args:
            ledger: The ledger.
        """
        if self.store is not None:
            self.store.set(LEDGER_KEY, ledger.to_json())

    def _earlier_without_store(self, session: JobSession) -> tuple[Ledger | None, Any]:
        # no task_state_store (Airflow before 3.3): find the newest job of an earlier try by
        # its key; whether its outcome was recorded is unknown, so a finished job counts as
        # recorded
        dag_id, run_id, task_id, map_index = self.ti_ids
        for t in range(self.try_number - 1, 0, -1):
            key = task_job_key(dag_id, run_id, task_id, map_index, t)
            found = session.runner.find_job(session.scheduler, key, session.cfg)
            if found is not None:
                ledger = Ledger(key, t, t, session.scheduler, found.app_handle, recorded=True)
                return ledger, found.status
        return None, None

    def _earlier_job(self, session: JobSession) -> tuple[Ledger | None, AppStatus | None]:
        """The ledger of the task instance and the status of its job."""
        ledger = self.read_ledger()
        if ledger is None:
            return self._earlier_without_store(session) if self.store is None else (None, None)
        try:
            if ledger.app_handle is None:  # the try died while submitting: find it by its key
                found = session.runner.find_job(ledger.scheduler or session.scheduler,
                                                ledger.job_key, session.cfg)
                if found is None:
                    return ledger, None
                ledger.app_handle = found.app_handle
                return ledger, found.status
            return ledger, session.runner.status(ledger.app_handle)
        except Exception as e:  # e.g. the earlier job's scheduler is no longer configured
            self.log.warning("cannot look up the job of try %s: %s", ledger.launched_by, e)
            return ledger, None

    # ---- start, record, clean up ------------------------------------------------------------
    def start(self, session: JobSession) -> str:
        """Re-attaches the session to the earlier try's job or launches a new one.

        Args:
            session: The try's job session.

        Returns:
            The job's handle.
        """
        assert session.key is not None
        ledger, status = self._earlier_job(session)
        new = Ledger(session.key, self.try_number, self.try_number, session.scheduler)

        def before_launch() -> None:
            if ledger is not None and ledger.extra.get("secret"):
                self.cleanup_secret(session.runner, ledger)  # the earlier job's, now unused
            if self.settings.secret_env:
                new.extra["secret"], new.extra["secret_on"] = self._hand_over_secrets(session)
            self.write_ledger(new)  # before submitting: a crash in between leaves the key

        decision = session.submit(earlier_job(ledger, status),
                                  Reattach.parse(self.settings.reattach), before_launch,
                                  look_up=False)
        if session.reattached and ledger is not None:
            ledger.owner = self.try_number
            self.write_ledger(ledger)
            self.log.info(
                "re-attached to tether job %s (%s) launched by try %s: %s",
                ledger.app_handle, status.state.name if status else "UNKNOWN",
                ledger.launched_by, decision.reason,
            )
        else:
            new.app_handle = session.app_handle
            self.write_ledger(new)
            self.log.info("submitted tether job %s (job key %s, try %s; %s)",
                          session.app_handle, session.key, self.try_number, decision.reason)
        return str(session.app_handle)

    def record(self, result: JobResult) -> None:
        """Marks the ledger's job as recorded (this try decided the task with its outcome),
        then cleans up: the job's secret, and the job itself per ``on_finish_action``.

        Args:
            result: The job's result.
        """
        ledger: Ledger | None = None
        try:
            ledger = self.read_ledger()
            if ledger is not None and ledger.app_handle == result.app_handle:
                ledger.recorded, ledger.state = True, result.state.name
                self.write_ledger(ledger)
        except Exception as e:  # the result decides the task; the ledger is best effort here
            self.log.warning("cannot record the job's outcome in task_state_store: %s", e)
        if not result.state.is_terminal():
            return
        with self.runner() as runner:
            if ledger is not None and ledger.extra.get("secret"):
                self.cleanup_secret(runner, ledger)
            self._finish_action(runner, result)

    def _finish_action(self, runner: Runner, result: JobResult) -> None:
        action = self.settings.on_finish_action
        if action == "delete" or (action == "delete_succeeded" and result.succeeded):
            self.log.info("deleting tether job %s (on_finish_action=%s)",
                          result.app_handle, action)
            try:
                runner.delete(result.app_handle)
            except Exception as e:
                self.log.warning("cannot delete tether job %s: %s", result.app_handle, e)

    def secret_of(self, app_handle: str) -> dict[str, Any] | None:
        """Where the job's ``secret_env`` secret lives, for a trigger to delete on a kill.

        Args:
            app_handle: The job.

        Returns:
            ``name`` and ``on`` (each scheduler holding it -> its run options), or None when
            the job has no secret.
        """
        ledger = self.read_ledger()
        if ledger is None or ledger.app_handle != app_handle or not ledger.extra.get("secret"):
            return None
        return {"name": str(ledger.extra["secret"]), "on": self._holders(ledger)}

    def _holders(self, ledger: Ledger) -> dict[str, Any]:
        """Scheduler -> run options, of every scheduler holding the ledger's secret (a
        ledger written before failover lists names only the job's scheduler)."""
        on = ledger.extra.get("secret_on")
        if isinstance(on, Mapping):
            return dict(on)
        return {ledger.scheduler or self.settings.scheduler: self.settings.cfg}

    def _hand_over_secrets(self, session: JobSession) -> tuple[str, dict[str, Any]]:
        """Stores ``secret_env`` in a secret of every candidate scheduler (a failover list's
        job may run on any of them); the job gets references, which each candidate renders
        natively. A candidate that cannot hold the secret fails the task before anything is
        submitted, and the secrets already stored are deleted.

        Returns:
            The secret's name, and scheduler -> the run options it was stored with.
        """
        from airflow.sdk.exceptions import AirflowFailException

        from tether.specs import SecretRef

        task_id = self.settings.task_id
        assert session.key is not None
        values = self._render(self.settings.secret_env, self.context)
        if not isinstance(values, Mapping):
            raise AirflowFailException(
                f"task {task_id!r}: secret_env must be a mapping of env name to value"
            )
        values = {str(k): str(v) for k, v in values.items()}
        _mask(values.values())
        name = secret_name(session.key)
        held: dict[str, Any] = {}
        for scheduler in session.schedulers:
            cfg = _own_cfg(session, scheduler)
            try:
                session.runner.put_secret(scheduler, name, values, cfg)
            except NotImplementedError as e:
                self._delete_secret(session.runner, name, held)
                where = "" if len(session.schedulers) == 1 else (
                    f" (candidate {scheduler!r} of {', '.join(session.schedulers)}: the job "
                    "may run on any candidate, so each must hold the secret; drop "
                    f"{scheduler!r} from the list, or give the job a SecretRef each "
                    "candidate has)")
                raise AirflowFailException(f"task {task_id!r}: secret_env: {e}{where}") from e
            held[scheduler] = cfg
        for role in session.app.roles:
            for var in values:
                role.env.pop(var, None)
                role.secrets[var] = SecretRef(name, var)
        self.log.info("secret_env %s handed to the job as secret %s on %s", sorted(values),
                      name, ", ".join(held))  # fmt: skip
        return name, held

    def cleanup_secret(self, runner: Runner, ledger: Ledger) -> None:
        """Deletes the ``secret_env`` secret of the ledger's job from every scheduler
        holding it (best effort).

        Args:
            runner: A runner.
            ledger: The ledger naming the secret.
        """
        name = str(ledger.extra.get("secret"))
        if self._delete_secret(runner, name, self._holders(ledger)):
            self.log.info("deleted secret %s of tether job %s", name, ledger.app_handle)

    def _delete_secret(self, runner: Runner, name: str, held: Mapping[str, Any]) -> bool:
        """Deletes a secret from each scheduler of ``held`` (-> its run options); warns
        about each one that fails. Returns whether all were deleted."""
        ok = True
        for scheduler, cfg in held.items():
            try:
                runner.delete_secret(scheduler, name, parse_cfg(runner, scheduler, cfg))
            except Exception as e:
                self.log.warning("cannot delete secret %s on %s: %s", name, scheduler, e)
                ok = False
        return ok


def _own_cfg(session: JobSession, scheduler: str) -> dict[str, Any]:
    """The session's run options that ``scheduler`` declares (all of them for one
    scheduler: it checks them itself)."""
    if len(session.schedulers) == 1:
        return dict(session.cfg)
    opts = session.runner.scheduler_run_opts(scheduler)
    return {k: v for k, v in session.cfg.items() if opts.get(k) is not None}


def _mask(values: Any) -> None:
    """Registers values with Airflow's secrets masker (task logs show ``***``)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    for v in values:
        if v:
            mask_secret(v)
