"""The Runner: the one front door to run, inspect and stop jobs on any scheduler.

Every caller (the CLI, the Airflow operator, the Prefect task, the KFP launcher step) goes
through it, so job identity, tracking wiring, outputs and cancellation behave the same
everywhere.

The Runner holds its collaborators and hands each call on to the one whose job it is: its
schedulers (:class:`~tether.runner.pool.SchedulerPool`), its components by name
(:class:`~tether.runner.components.Components`: find, defaults, materialize), the launch
path (:class:`~tether.runner.launch.Launcher`: render the native request, submit it, and
find or re-attach to a job by its job key, by the one rule of :mod:`tether.runner.reattach`),
the follow path (:class:`~tether.runner.following.Following`, loaded when an app is first
followed: ``status``, ``wait``, ``watch`` and ``wait_any`` through the process's watch hub,
:mod:`tether.runner.follow`),
what is done with an app already launched (:class:`~tether.runner.launched.LaunchedApps`:
describe, logs, outputs, cancel) and the logical jobs (``chain://...``,
:class:`~tether.runner.chains.Chains`, loaded when first met). The tracking environment of
each role comes from :mod:`tether.runner.wiring`.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, overload

from tether.config import TetherConfig
from tether.runner.components import Components
from tether.runner.launch import Launcher
from tether.runner.launched import LaunchedApps
from tether.runner.logical import check_candidates_can_run, is_chain_handle
from tether.runner.pool import DEFAULT_SESSION, SchedulerPool
from tether.runner.recording import handle_fields, recorded
from tether.schedulers import get_scheduler_factories
from tether.schedulers.api import ListAppResponse, Scheduler, Stream
from tether.schedulers.capabilities import Capabilities
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppHandle,
    CfgVal,
    runopts,
)
from tether.workspace import Workspace

if TYPE_CHECKING:
    from datetime import datetime

    from tether.runner.chains import Chains
    from tether.runner.events import AppEvent
    from tether.runner.follow import AppWatch
    from tether.runner.following import Following
    from tether.runner.reattach import ExistingJob, RunOutcome
    from tether.schedulers import SchedulerFactory
    from tether.specs import AppStatus
    from tether.tracker.progress import Progress

log: logging.Logger = logging.getLogger(__name__)


class Runner:
    """Runs AppDefs and components on schedulers and tracks them by app handle.

    Args:
        name: Session name, part of every handle.
        scheduler_factories: Available schedulers (default: the registry).
        component_defaults: Default component arguments by component name.
        scheduler_params: Keyword arguments for scheduler factories: either by scheduler name
            (``{"kubernetes": {...}}``) or, as TorchX takes them, one flat dict passed to every
            factory (``{"namespace": "ml"}``). It is read by scheduler name when every key is
            a scheduler name and every value a mapping.
        config: The ``.tetherconfig`` (default: loaded from the usual places).
    """

    def __init__(
        self,
        name: str = DEFAULT_SESSION,
        scheduler_factories: Mapping[str, SchedulerFactory] | None = None,
        component_defaults: Mapping[str, Mapping[str, str]] | None = None,
        scheduler_params: Mapping[str, Any] | None = None,
        config: TetherConfig | None = None,
    ) -> None:
        self._name = name
        self._pool = SchedulerPool(name, scheduler_factories, scheduler_params, config)
        self._apps = LaunchedApps(self._pool)
        self._components = Components(lambda: self.config, component_defaults)
        self._chain_ops: Chains | None = None
        self._follow_ops: Following | None = None
        self._launch = Launcher(self._pool, name, lambda: self._chains, self.status)

    # ---- lifecycle and the schedulers it holds -------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes every scheduler this runner created. Safe to call twice."""
        self._pool.close()

    @property
    def _chains(self) -> Chains:
        """The logical jobs (:mod:`tether.runner.chains`, loaded when first met)."""
        if self._chain_ops is None:
            from tether.runner.chains import Chains

            self._chain_ops = Chains(self, self._name)
        return self._chain_ops

    @property
    def _follow(self) -> Following:
        """The follow path (:mod:`tether.runner.following`, loaded when an app is first
        followed: a dry run does not)."""
        if self._follow_ops is None:
            from tether.runner.following import Following

            self._follow_ops = Following(self._pool, lambda: self._chains)
        return self._follow_ops

    @property
    def session_name(self) -> str:
        """The session name, part of every handle."""
        return self._name

    @property
    def config(self) -> TetherConfig:
        """The ``.tetherconfig`` in effect (loaded on first use)."""
        return self._pool.config

    def scheduler_backends(self) -> list[str]:
        """Names of the schedulers this runner can use."""
        return self._pool.backends()

    def scheduler_capabilities(self, scheduler: str) -> Capabilities:
        """What a scheduler supports (its declared capabilities).

        Args:
            scheduler: The scheduler's name.

        Returns:
            Its capabilities.
        """
        return self._pool.get(scheduler).capabilities

    def check_candidates(
        self, app: AppDef, schedulers: Sequence[str], workspace: Workspace | str | None = None
    ) -> None:
        """Refuses a failover list naming a scheduler that could not run ``app`` (one
        without a capability the app needs), before anything is submitted; ``run`` and
        ``run(dryrun=True)`` check it too.

        Args:
            app: The app.
            schedulers: The candidates, in order (one alone is checked by its dry-run).
            workspace: The workspace given for roles that have none.

        Raises:
            CandidateCapabilityError: Naming the ``scheduler`` field, each such candidate,
                the capability it lacks and what of the app needs it.
        """
        check_candidates_can_run(app, schedulers, self.scheduler_capabilities, workspace)

    def scheduler_run_opts(self, scheduler: str) -> runopts:
        """The run options of a scheduler.

        Args:
            scheduler: Its name.

        Returns:
            The options.
        """
        return self._pool.get(scheduler).run_opts()

    def cfg_from_str(self, scheduler: str, *cfg_literal: str) -> Mapping[str, CfgVal]:
        """Parses ``-cfg`` strings with a scheduler's run options, as TorchX's Runner.

        ``runner.cfg_from_str("local_cwd", "log_dir=/tmp/x", "prepend_cwd=True")`` gives
        ``{"log_dir": "/tmp/x", "prepend_cwd": True}``; a later string wins on a repeated key.

        Args:
            scheduler: Its name.
            *cfg_literal: Strings of ``key=value`` items (see ``runopts.cfg_from_str``).

        Returns:
            The typed options.
        """
        opts = self.scheduler_run_opts(scheduler)
        cfg: dict[str, CfgVal] = {}
        for literal in cfg_literal:
            cfg.update(opts.cfg_from_str(literal))
        return cfg

    def _scheduler(self, name: str) -> Scheduler[Any]:
        return self._pool.get(name)

    def _scheduler_for(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str]:
        return self._pool.for_handle(app_handle)

    # ---- components (see tether.runner.components) ---------------------------------------
    def materialize_component(
        self, component: str, component_args: list[str] | Mapping[str, Any]
    ) -> AppDef:
        """Finds a component by name and calls it (see :meth:`Components.materialize`).

        Args:
            component: A builtin (``dist.ddp``), ``file.py:fn`` or ``pkg.module:fn``.
            component_args: CLI-style arguments, or keyword arguments.

        Returns:
            The AppDef.
        """
        return self._components.materialize(component, component_args)

    def dryrun_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """:meth:`dryrun` of :meth:`materialize_component` ``(component, component_args)``."""
        app = self.materialize_component(component, component_args)
        return self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)

    def run_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> AppHandle:
        """:meth:`run` of :meth:`materialize_component` ``(component, component_args)``."""
        app = self.materialize_component(component, component_args)
        return self.run(app, scheduler, cfg, workspace, parent_run_id, job_key)

    # ---- render and submit ---------------------------------------------------------------
    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """Renders the native request for ``app`` on ``scheduler`` without submitting it.

        The app is copied (its roles' ``overrides`` values are shared, not copied); the copy
        gets the tracking environment (``TETHER_JOB_ID``,
        ``TETHER_PARENT_RUN_ID``, ``TETHER_TRACKERS``, ``TETHER_OUTPUTS_URL``...), the job key
        in its metadata, the workspace, and ``.tetherconfig`` defaults for the options.

        Args:
            app: The app.
            scheduler: The scheduler's name.
            cfg: Run options (explicit values win over ``.tetherconfig``).
            workspace: A workspace (or ``--workspace`` string) for roles that have none.
            parent_run_id: Tracking parent run (default ``$TETHER_PARENT_RUN_ID``).
            job_key: Stable identity of the job (see :meth:`run`).

        Returns:
            The request; ``str()`` shows it with secrets redacted.
        """
        return self._launch.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle:
        """Submits a request rendered by :meth:`dryrun`.

        Args:
            dryrun_info: The request.

        Returns:
            The app handle.
        """
        return self._launch.schedule(dryrun_info)

    def find_job(
        self, scheduler: str, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> ExistingJob | None:
        """The newest job submitted with identity ``job_key``, if any: the logical job
        (``chain://...``) when one was started with that key, whatever its attempts'
        schedulers.

        Args:
            scheduler: The scheduler's name.
            job_key: The identity.
            cfg: The run options the job is (or would be) submitted with; where they say
                where the backend's jobs are (Slurm's ``transport``, ``host``...), that is
                where the job is looked for (``.tetherconfig`` defaults apply, as for
                :meth:`dryrun`).

        Returns:
            Its handle and status, or None.
        """
        return self._launch.find_job(scheduler, job_key, cfg)

    @overload
    def run(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = ...,
        workspace: Workspace | str | None = ...,
        parent_run_id: str | None = ...,
        job_key: str | None = ...,
        dryrun: Literal[False] = ...,
    ) -> AppHandle: ...

    @overload
    def run(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = ...,
        workspace: Workspace | str | None = ...,
        parent_run_id: str | None = ...,
        job_key: str | None = ...,
        *,
        dryrun: Literal[True],
    ) -> AppDryRunInfo[Any]: ...

    def run(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
        dryrun: bool = False,
    ) -> AppHandle | AppDryRunInfo[Any]:
        """Runs ``app`` on ``scheduler`` and returns its handle without waiting.

        With ``job_key`` the runner re-attaches to a job already launched with that key (see
        :meth:`run_or_attach`). An app with a recovery policy, or a list of schedulers, runs
        as one logical job (``chain://...``) over attempts (see :mod:`tether.runner.chains`).

        Args:
            app: The app.
            scheduler: The scheduler's name, or the schedulers to try in order (failover).
            cfg: Run options.
            workspace: A workspace for roles that have none.
            parent_run_id: Tracking parent run.
            job_key: Stable job identity.
            dryrun: Render the request and return it (as :meth:`dryrun`) without submitting.

        Returns:
            The app handle, or the request with ``dryrun=True``.
        """
        if dryrun:
            if isinstance(scheduler, str):
                return self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)
            self.check_candidates(app, scheduler, workspace)
            return self.dryrun(app, scheduler[0], cfg, workspace, parent_run_id, job_key)
        return self.run_or_attach(app, scheduler, cfg, workspace, parent_run_id, job_key).app_handle

    def run_or_attach(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> RunOutcome:
        """Submits ``app`` unless a job with the same identity already exists.

        With ``job_key`` (a stable identity such as an orchestrator's task-instance id), the
        runner first looks for a job already launched with that key: one still running is
        re-attached (nothing submitted), one that SUCCEEDED is returned as is; a new job is
        submitted only when there is none, or the newest one FAILED or was CANCELLED (a retry).
        That is the rule of :mod:`tether.runner.reattach` with no record of outcomes. An app
        with a recovery policy, or a list of schedulers, starts (or adopts) a chain instead
        (:meth:`Chains.start <tether.runner.chains.Chains.start>`: the same rule applies to
        the logical job).

        Args:
            app: The app.
            scheduler: The scheduler's name, or the schedulers to try in order (failover).
            cfg: Run options.
            workspace: A workspace for roles that have none.
            parent_run_id: Tracking parent run.
            job_key: Stable job identity.

        Returns:
            The handle, and whether it is a job launched earlier.
        """
        return self._launch.run_or_attach(app, scheduler, cfg, workspace, parent_run_id,
                                          job_key)

    # ---- an app already launched (see LaunchedApps) --------------------------------------
    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """The app's status (from the process's watch when it follows the app, else read).

        Args:
            app_handle: The handle.

        Returns:
            The status, or None when the scheduler does not know the app.
        """
        return self._follow.status(app_handle)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Blocks until the app is finished, following it through the process's watch hub.

        Any number of waits, in any number of threads, share one watch per backend
        connection. The scheduler's ``reconcile`` runs when the app changes (a failed one is
        retried every ``wait_interval`` seconds).

        Args:
            app_handle: The handle.
            wait_interval: Seconds between retries of a reconcile that failed.
            timeout: Give up after this many seconds and return the last status.

        Returns:
            The final status, or None when the app does not exist (or was deleted).

        Raises:
            WatchReadError: When the app's backend cannot be read for longer than the
                watch hub's failure policy allows (a ``BackendError`` of kind
                ``connection``, naming the backend and its last error; see
                ``docs/scale.md``), rather than waiting in silence.
        """
        return self._follow.wait(app_handle, wait_interval, timeout)

    def watch(
        self, app_handles: Iterable[AppHandle], timeout: float | None = None
    ) -> Iterator[AppEvent]:
        """Each change of many apps until all are final (see :func:`tether.runner.follow.watch`).

        A logical handle (``chain://...``) is followed through its attempts, the watch
        submitting each attempt its recovery policy calls for (see
        :mod:`tether.runner.chain_watch`); so are those of ``awatch``, ``wait_any`` and
        ``open_watch``.

        Args:
            app_handles: The apps.
            timeout: The longest time in all, in seconds.

        Returns:
            The changes: each app's current state first, its final one exactly once. Reading
            them raises ``WatchReadError`` when an app's backend cannot be read (as
            :meth:`wait`); so do ``awatch``, ``wait_any`` and ``open_watch``'s ``next``.
        """
        return self._follow.watch(app_handles, timeout)

    def open_watch(
        self, app_handles: Iterable[AppHandle], wait_interval: float = 10
    ) -> AppWatch:
        """One subscription to the apps, held across many short waits (close it when done).

        For a follower that must look up between waits (a task that polls for a stop
        request): ``next(timeout)`` returns the next change or None after ``timeout``,
        without giving the subscription up (see :class:`tether.runner.follow.AppWatch`)::

            with runner.open_watch([handle]) as w:
                while (ev := w.next(timeout=0.5)) is None or not ev.final:
                    check_for_stop()

        Args:
            app_handles: The apps.
            wait_interval: Seconds between retries of a reconcile that failed.

        Returns:
            The watch.
        """
        return self._follow.open_watch(app_handles, wait_interval)

    def awatch(
        self,
        app_handles: Iterable[AppHandle],
        timeout: float | None = None,
        wait_interval: float = 10,
    ) -> AsyncIterator[AppEvent]:
        """:meth:`watch` on an asyncio event loop (see :func:`tether.runner.follow.awatch`).

        Args:
            app_handles: The apps.
            timeout: The longest time in all, in seconds.
            wait_interval: Seconds between retries of a reconcile that failed.

        Returns:
            The changes, to read with ``async for``.
        """
        return self._follow.awatch(app_handles, timeout, wait_interval)

    def wait_any(
        self, app_handles: Iterable[AppHandle], timeout: float | None = None
    ) -> AppEvent | None:
        """The first of the apps to finish (or be found gone).

        Args:
            app_handles: The apps.
            timeout: The longest wait, in seconds.

        Returns:
            Its final event, or None after ``timeout``.
        """
        return self._follow.wait_any(app_handles, timeout)

    def reconcile(self, app_handle: AppHandle) -> None:
        """Applies what the scheduler's engine cannot do itself (see ``Scheduler.reconcile``).

        :meth:`wait` calls it on every poll; a caller that polls :meth:`status` on its own
        calls it before each poll. Idempotent.

        Args:
            app_handle: The handle.
        """
        handle = self._attempt(app_handle)
        if handle is not None:
            self._apps.reconcile(handle)

    def _attempt(self, app_handle: AppHandle) -> AppHandle | None:
        """The handle a call acts on: the current attempt's for a logical handle."""
        return self._chains.current(app_handle) if is_chain_handle(app_handle) else app_handle

    def attempts(self, app_handle: AppHandle) -> builtins.list[dict[str, Any]]:
        """The attempts of a logical job (``chain://...``), oldest first: each one's
        ``attempt``, ``scheduler``, ``handle``, ``state``, ``cause`` and ``refused``
        (schedulers that refused it for capacity); empty for any other handle.

        Args:
            app_handle: The handle.

        Returns:
            One dict per attempt.
        """
        if not is_chain_handle(app_handle):
            return []
        return [dataclasses.asdict(a) for a in self._chains.attempts(app_handle)]

    @recorded("describe", lambda self, app_handle: handle_fields(app_handle))
    def describe(self, app_handle: AppHandle) -> AppDef | None:
        """The AppDef of an app: the one this runner submitted (as TorchX), else rebuilt as
        far as the scheduler can (named after the app id).

        Args:
            app_handle: The handle.

        Returns:
            The AppDef, or None when the app does not exist.
        """
        handle = self._attempt(app_handle)
        return self._apps.describe(handle) if handle is not None else None

    @recorded("list", lambda self, scheduler: {"scheduler": scheduler})
    def list(self, scheduler: str) -> builtins.list[ListAppResponse]:
        """The apps a scheduler knows, with their handles.

        Args:
            scheduler: The scheduler's name.

        Returns:
            The apps.
        """
        return self._apps.list(scheduler)

    @recorded("log_lines", lambda self, app_handle, *a, **k: handle_fields(app_handle))
    def log_lines(
        self,
        app_handle: AppHandle,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of a role (each ends with ``\\n``).

        Args:
            app_handle: The handle.
            role_name: The role.
            k: The replica.
            regex: Only matching lines.
            since: Only lines at or after this time.
            until: Only lines before this time.
            should_tail: Follow until the replica finishes.
            streams: stdout, stderr or combined.

        Returns:
            The lines.

        Raises:
            UnknownAppError: When the app does not exist.
        """
        if is_chain_handle(app_handle):
            return self._chains.log_lines(app_handle, lambda h, tail: iter(self._apps.log_lines(
                h, role_name, k, regex, since, until, tail, streams)), should_tail)
        return self._apps.log_lines(
            app_handle, role_name, k, regex, since, until, should_tail, streams
        )

    def outputs(self, app_handle: AppHandle) -> dict[str, Any]:
        """The outputs a (finished) app published.

        Args:
            app_handle: The handle.

        Returns:
            Output name to value.
        """
        handle = self._attempt(app_handle)
        return self._apps.outputs(handle) if handle is not None else {}

    def progress(self, app_handle: AppHandle) -> Progress | None:
        """The latest progress report of an app (:func:`tether.runtime.report`), or None;
        for a logical job (``chain://...``), its current attempt's."""
        handle = self._attempt(app_handle)
        return self._apps.progress(handle) if handle is not None else None

    @recorded("cancel", lambda self, app_handle: handle_fields(app_handle))
    def cancel(self, app_handle: AppHandle) -> None:
        """Cancels the app (idempotent; returns without waiting for it to stop).

        Args:
            app_handle: The handle.
        """
        if is_chain_handle(app_handle):
            self._chains.cancel(app_handle)  # stops recovery, then cancels the attempt
        else:
            self._apps.cancel(app_handle)

    def stop(self, app_handle: AppHandle) -> None:
        """Deprecated alias of :meth:`cancel` (TorchX's ``Runner.stop``).

        Args:
            app_handle: The handle.
        """
        warnings.warn("Runner.stop is deprecated; use Runner.cancel", DeprecationWarning, 2)
        self.cancel(app_handle)

    def delete(self, app_handle: AppHandle) -> None:
        """Cancels the app if needed and removes what the scheduler keeps of it. Idempotent.

        Args:
            app_handle: The handle.
        """
        if is_chain_handle(app_handle):
            self._chains.delete(app_handle)
        else:
            self._apps.delete(app_handle)

    # ---- secrets the caller hands over ---------------------------------------------------
    def put_secret(
        self,
        scheduler: str,
        name: str,
        values: Mapping[str, str],
        cfg: Mapping[str, CfgVal] | None = None,
    ) -> None:
        """Stores values as a secret the scheduler holds (a Kubernetes Secret), for
        :class:`~tether.specs.SecretRef` references ``(name, key)``. Creates or replaces it.

        Args:
            scheduler: The scheduler's name.
            name: The secret's name.
            values: Key to value.
            cfg: Run options (where the secret lives, e.g. the Kubernetes namespace).

        Raises:
            NotImplementedError: When the scheduler holds no secrets.
        """
        sched = self._pool.get(scheduler)
        opts = sched.run_opts()
        sched.put_secret(name, values, opts.resolve(self.config.apply(scheduler, cfg, opts),
                                                    scheduler))

    def delete_secret(
        self, scheduler: str, name: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> None:
        """Deletes a secret made by :meth:`put_secret` (idempotent).

        Args:
            scheduler: The scheduler's name.
            name: The secret's name.
            cfg: Run options (where the secret lives).
        """
        sched = self._pool.get(scheduler)
        opts = sched.run_opts()
        sched.delete_secret(name, opts.resolve(self.config.apply(scheduler, cfg, opts),
                                               scheduler))

    def __repr__(self) -> str:
        return f"Runner(name={self._name!r}, schedulers={self._pool.built()})"


def get_runner(
    name: str | None = None,
    component_defaults: Mapping[str, Mapping[str, str]] | None = None,
    **scheduler_params: Any,
) -> Runner:
    """Creates a Runner (use it as a context manager to close its schedulers).

    Args:
        name: Session name (default ``tether``).
        component_defaults: Default component arguments by component name.
        **scheduler_params: Keyword arguments passed to every scheduler factory.

    Returns:
        The runner.
    """
    factories = get_scheduler_factories()
    params = {n: dict(scheduler_params) for n in factories}
    return Runner(
        name or DEFAULT_SESSION,
        scheduler_factories=factories,
        component_defaults=component_defaults,
        scheduler_params=params,
    )
