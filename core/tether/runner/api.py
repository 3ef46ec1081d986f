"""The Runner: the one front door to run, inspect and stop jobs on any scheduler.

Every caller (the CLI, the Airflow operator, the Prefect task, the KFP launcher step) goes
through it, so job identity, tracking wiring, outputs and cancellation behave the same
everywhere.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, overload

from tether.config import TetherConfig, load_config
from tether.schedulers import get_scheduler_factories, get_scheduler_factory
from tether.schedulers.api import JOB_KEY, ListAppResponse, Scheduler, Stream
from tether.schedulers.capabilities import Capabilities
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppState,
    AppStatus,
    CfgVal,
    macros,
    make_app_handle,
    parse_app_handle,
    runopts,
)
from tether.specs.status import is_terminal
from tether.tracker.env import (
    ENV_APP_NAME,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_TRACKERS,
    tracker_config_env,
)
from tether.tracker.outputs import ENV_OUTPUTS_URL, outputs_root, outputs_url, read_outputs
from tether.workspace import Workspace
from tether.workspace.api import WorkspaceMixin

if TYPE_CHECKING:
    from datetime import datetime

    from tether.schedulers import SchedulerFactory

log: logging.Logger = logging.getLogger(__name__)

DEFAULT_SESSION = "tether"

ENV_JOB_KEY = "TETHER_JOB_KEY"


class UnknownAppError(LookupError):
    """The handle names an app the scheduler does not know."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"no app {app_handle!r}: the scheduler does not know it (finished apps may have "
            "been deleted; `tether list -s SCHEDULER` shows the ones it knows)"
        )


@dataclass
class ExistingJob:
    """A job found by its job identity.

    Attributes:
        app_handle: Its handle.
        status: Its current status.
    """

    app_handle: AppHandle
    status: AppStatus


@dataclass
class RunOutcome:
    """What :meth:`Runner.run_or_attach` did.

    Attributes:
        app_handle: The job's handle.
        reattached: True when the job was launched earlier (same job key), not now.
    """

    app_handle: AppHandle
    reattached: bool


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
        self._factories = dict(scheduler_factories) if scheduler_factories is not None else None
        self._component_defaults = {k: dict(v) for k, v in (component_defaults or {}).items()}
        self._scheduler_params = dict(scheduler_params or {})
        self._config = config
        self._schedulers: dict[str, Scheduler[Any]] = {}

    # ---- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Runner:
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
        for sched in self._schedulers.values():
            sched.close()
        self._schedulers.clear()

    @property
    def config(self) -> TetherConfig:
        """The ``.tetherconfig`` in effect (loaded on first use)."""
        if self._config is None:
            self._config = load_config()
        return self._config

    def scheduler_backends(self) -> list[str]:
        """Names of the schedulers this runner can use."""
        return list(self._factories or get_scheduler_factories())

    def _scheduler(self, name: str) -> Scheduler[Any]:
        sched = self._schedulers.get(name)
        if sched is None:
            if self._factories is not None:
                if name not in self._factories:
                    import difflib  # for an error's hint only: not on the start-up path

                    close = difflib.get_close_matches(name, list(self._factories), n=3, cutoff=0.5)
                    hint = f"; did you mean {', '.join(close)}?" if close else ""
                    raise KeyError(
                        f"unknown scheduler {name!r}{hint} "
                        f"(available: {', '.join(self._factories)})"
                    )
                factory = self._factories[name]
            else:
                factory = get_scheduler_factory(name)
            sched = factory(self._name, **self._params_for(name))
            self._schedulers[name] = sched
        return sched

    def _params_for(self, name: str) -> dict[str, Any]:
        params = self._scheduler_params
        if not params:
            return {}
        names = set(self.scheduler_backends())
        by_name = all(k in names and isinstance(v, Mapping) for k, v in params.items())
        return dict(params.get(name, {})) if by_name else dict(params)

    def _scheduler_for(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str]:
        parsed = parse_app_handle(app_handle)
        return self._scheduler(parsed.scheduler_backend), parsed.app_id

    def scheduler_capabilities(self, scheduler: str) -> Capabilities:
        """What a scheduler supports (its declared capabilities).

        Args:
            scheduler: The scheduler's name.

        Returns:
            Its capabilities.
        """
        return self._scheduler(scheduler).capabilities

    def scheduler_run_opts(self, scheduler: str) -> runopts:
        """The run options of a scheduler.

        Args:
            scheduler: Its name.

        Returns:
            The options.
        """
        return self._scheduler(scheduler).run_opts()

    # ---- components ----------------------------------------------------------------------
    def materialize_component(
        self, component: str, component_args: list[str] | Mapping[str, Any]
    ) -> AppDef:
        """Finds a component by name and calls it with ``component_args``.

        Args:
            component: A builtin (``dist.ddp``), ``file.py:fn`` or ``pkg.module:fn``.
            component_args: CLI-style arguments, or keyword arguments.

        Returns:
            The AppDef.
        """
        from tether.components.args import materialize
        from tether.components.finder import get_component

        info = get_component(component)
        defaults = dict(self.config.component_defaults(info.name))
        defaults.update(self._component_defaults.get(info.name, {}))
        return materialize(info.fn, component_args, defaults)

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
        """Like :meth:`dryrun` for a component found by name.

        Args:
            component: The component's name.
            component_args: Its arguments.
            scheduler: The scheduler.
            cfg: Run options.
            workspace: A workspace for the roles that have none.
            parent_run_id: Tracking parent.
            job_key: Stable job identity.

        Returns:
            The rendered request.
        """
        app = self.materialize_component(component, component_args)
        return self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)

    def run_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> AppHandle:
        """Finds a component by name, materializes it and runs it (see :meth:`run`).

        Args:
            component: The component's name.
            component_args: Its arguments.
            scheduler: The scheduler.
            cfg: Run options.
            workspace: A workspace for the roles that have none.
            parent_run_id: Tracking parent.
            job_key: Stable job identity.

        Returns:
            The app handle.
        """
        app = self.materialize_component(component, component_args)
        return self.run(app, scheduler, cfg, workspace, parent_run_id, job_key)

    # ---- render and submit ---------------------------------------------------------------
    def _wire_env(
        self, app: AppDef, scheduler: str, parent_run_id: str | None, job_key: str | None
    ) -> None:
        job_id = make_app_handle(scheduler, self._name, macros.app_id)
        parent = parent_run_id or os.environ.get(ENV_PARENT_RUN_ID)
        trackers = self._trackers()
        out_url = outputs_url(
            outputs_root(self.config.section("tether:outputs").get("url")), scheduler,
            macros.app_id,
        )
        for role in app.roles:
            role.env.setdefault(ENV_JOB_ID, job_id)
            role.env.setdefault(ENV_APP_NAME, app.name)
            role.env.setdefault(ENV_OUTPUTS_URL, out_url)
            if parent:
                role.env.setdefault(ENV_PARENT_RUN_ID, parent)
            if job_key:
                role.env.setdefault(ENV_JOB_KEY, job_key)
            if trackers:
                role.env.setdefault(ENV_TRACKERS, ",".join(trackers))
                for name, conf in trackers.items():
                    if conf is not None:
                        role.env.setdefault(tracker_config_env(name), conf)

    def _trackers(self) -> dict[str, str | None]:
        env = os.environ.get(ENV_TRACKERS)
        if env:
            return {
                n: os.environ.get(tracker_config_env(n))
                for n in (x.strip() for x in env.split(","))
                if n
            }
        return self.config.trackers()

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

        The app is copied; the copy gets the tracking environment (``TETHER_JOB_ID``,
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
        sched = self._scheduler(scheduler)
        app = copy.deepcopy(app)
        self._wire_env(app, scheduler, parent_run_id, job_key)
        if job_key:
            app.metadata[JOB_KEY] = job_key
        ws = Workspace.from_str(workspace) if isinstance(workspace, str) else workspace
        if ws is not None:
            for role in app.roles:
                if role.workspace is None:
                    role.workspace = ws
        _warn_default_image(app, scheduler, sched.capabilities)
        opts = sched.run_opts()
        merged = self.config.apply(scheduler, cfg, opts)
        if isinstance(sched, WorkspaceMixin) and any(r.workspace is not None for r in app.roles):
            sched.build_workspaces(app.roles, opts.resolve(merged, scheduler))
        info = sched.submit_dryrun(app, merged)
        # schedule() finds the scheduler by the name this runner knows it under (a plugin's
        # registered name may differ from its ``backend``)
        info.scheduler = scheduler
        return info

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle:
        """Submits a request rendered by :meth:`dryrun`.

        Args:
            dryrun_info: The request.

        Returns:
            The app handle.
        """
        backend = dryrun_info._scheduler
        if backend is None:
            raise ValueError("dryrun_info was not produced by Runner.dryrun/submit_dryrun")
        sched = self._scheduler(backend)
        app_id = sched.schedule(dryrun_info)
        handle = make_app_handle(backend, self._name, app_id)
        app_name = dryrun_info._app.name if dryrun_info._app else "?"
        log.info("launched app %s as %s", app_name, handle)
        return handle

    def find_job(self, scheduler: str, job_key: str) -> ExistingJob | None:
        """The newest job submitted with identity ``job_key``, if any.

        Args:
            scheduler: The scheduler's name.
            job_key: The identity.

        Returns:
            Its handle and status, or None.
        """
        sched = self._scheduler(scheduler)
        found: list[ListAppResponse] = sched.find_jobs(job_key)
        for entry in reversed(found):
            handle = make_app_handle(scheduler, self._name, entry.app_id)
            status = self.status(handle)
            if status is not None:
                return ExistingJob(handle, status)
        return None

    @overload
    def run(
        self,
        app: AppDef,
        scheduler: str,
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
        scheduler: str,
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
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
        dryrun: bool = False,
    ) -> AppHandle | AppDryRunInfo[Any]:
        """Runs ``app`` on ``scheduler`` and returns its handle without waiting.

        With ``job_key`` the runner re-attaches to a job already launched with that key (see
        :meth:`run_or_attach`).

        Args:
            app: The app.
            scheduler: The scheduler's name.
            cfg: Run options.
            workspace: A workspace for roles that have none.
            parent_run_id: Tracking parent run.
            job_key: Stable job identity.
            dryrun: Render the request and return it (as :meth:`dryrun`) without submitting.

        Returns:
            The app handle, or the request with ``dryrun=True``.
        """
        if dryrun:
            return self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)
        return self.run_or_attach(app, scheduler, cfg, workspace, parent_run_id, job_key).app_handle

    def run_or_attach(
        self,
        app: AppDef,
        scheduler: str,
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

        Args:
            app: The app.
            scheduler: The scheduler's name.
            cfg: Run options.
            workspace: A workspace for roles that have none.
            parent_run_id: Tracking parent run.
            job_key: Stable job identity.

        Returns:
            The handle, and whether it is a job launched earlier.
        """
        if job_key:
            existing = self.find_job(scheduler, job_key)
            if existing is not None and existing.status.state not in (
                AppState.FAILED,
                AppState.CANCELLED,
            ):
                log.info(
                    "job key %r: re-attaching to %s (%s) instead of submitting a duplicate",
                    job_key, existing.app_handle, existing.status.state.name,
                )
                return RunOutcome(existing.app_handle, reattached=True)
        info = self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)
        return RunOutcome(self.schedule(info), reattached=False)

    # ---- query ---------------------------------------------------------------------------
    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """The app's status, or None when the scheduler does not know it.

        Args:
            app_handle: The handle.

        Returns:
            The status.
        """
        sched, app_id = self._scheduler_for(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        return AppStatus(
            state=desc.state,
            num_restarts=desc.num_restarts,
            msg=desc.msg if desc.msg != "<NONE>" else "",
            structured_error_msg=desc.structured_error_msg,
            ui_url=desc.ui_url,
            roles=desc.roles_statuses,
        )

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Blocks until the app is finished.

        Schedulers that can notice completion directly (``local_cwd``) return within tens of
        milliseconds; others are polled every ``wait_interval`` seconds. Each poll first calls
        the scheduler's :meth:`~tether.schedulers.api.Scheduler.reconcile` (retries the engine
        lacks), so a waiting caller drives them; the status itself is a pure read.

        Args:
            app_handle: The handle.
            wait_interval: Seconds between polls.
            timeout: Give up after this many seconds and return the last status.

        Returns:
            The final status, or None when the app does not exist.
        """
        sched, app_id = self._scheduler_for(app_handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sched.reconcile(app_id)
            status = self.status(app_handle)
            if status is not None and is_terminal(status.state):
                sched.reconcile(app_id)  # e.g. stop the other replicas after a final failure
            if status is None or is_terminal(status.state):
                return status
            pause = wait_interval
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return status
                pause = min(pause, left)
            sched.wait_for_change(app_id, pause)

    def reconcile(self, app_handle: AppHandle) -> None:
        """Applies what the scheduler's engine cannot do itself (see ``Scheduler.reconcile``).

        :meth:`wait` calls it on every poll; a caller that polls :meth:`status` on its own
        (an orchestrator's trigger) calls it before each poll. Idempotent.

        Args:
            app_handle: The handle.
        """
        sched, app_id = self._scheduler_for(app_handle)
        sched.reconcile(app_id)

    def describe(self, app_handle: AppHandle) -> AppDef | None:
        """Rebuilds the AppDef of an app as far as the scheduler can.

        Args:
            app_handle: The handle.

        Returns:
            The AppDef, or None when the app does not exist.
        """
        sched, app_id = self._scheduler_for(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        return AppDef(name=app_id, roles=desc.roles)

    def list(self, scheduler: str) -> list[ListAppResponse]:
        """The apps a scheduler knows, with their handles.

        Args:
            scheduler: The scheduler's name.

        Returns:
            The apps.
        """
        apps = self._scheduler(scheduler).list()
        for app in apps:
            app.app_handle = make_app_handle(scheduler, self._name, app.app_id)
        return apps

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
        sched, app_id = self._scheduler_for(app_handle)
        if not sched.exists(app_id):
            raise UnknownAppError(app_handle)
        return sched.log_iter(app_id, role_name, k, regex, since, until, should_tail, streams)

    def outputs(self, app_handle: AppHandle) -> dict[str, Any]:
        """The outputs a (finished) app published.

        Args:
            app_handle: The handle.

        Returns:
            Output name to value.
        """
        parsed = parse_app_handle(app_handle)
        root = outputs_root(self.config.section("tether:outputs").get("url"))
        return read_outputs(outputs_url(root, parsed.scheduler_backend, parsed.app_id))

    # ---- stop ----------------------------------------------------------------------------
    def cancel(self, app_handle: AppHandle) -> None:
        """Cancels the app (idempotent; returns without waiting for it to stop).

        Args:
            app_handle: The handle.
        """
        sched, app_id = self._scheduler_for(app_handle)
        sched.cancel(app_id)

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
        sched, app_id = self._scheduler_for(app_handle)
        sched.delete(app_id)

    # ---- secrets the caller hands over -----------------------------------------------------
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
        sched = self._scheduler(scheduler)
        opts = sched.run_opts()
        resolved = opts.resolve(self.config.apply(scheduler, cfg, opts), scheduler)
        sched.put_secret(name, values, resolved)

    def delete_secret(
        self, scheduler: str, name: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> None:
        """Deletes a secret made by :meth:`put_secret` (idempotent).

        Args:
            scheduler: The scheduler's name.
            name: The secret's name.
            cfg: Run options (where the secret lives).
        """
        sched = self._scheduler(scheduler)
        opts = sched.run_opts()
        resolved = opts.resolve(self.config.apply(scheduler, cfg, opts), scheduler)
        sched.delete_secret(name, resolved)

    def __repr__(self) -> str:
        return f"Runner(name={self._name!r}, schedulers={list(self._schedulers)})"


def _warn_default_image(app: AppDef, scheduler: str, caps: Capabilities) -> None:
    """Warns when a role of ``app`` runs tether's default image on a remote backend, where
    nodes pull it from its registry (your build is not there unless you pushed it)."""
    if caps.runs_on_this_host or not caps.needs_image:
        return
    from tether.components import DEFAULT_IMAGE

    for role in app.roles:
        if role.image == DEFAULT_IMAGE:
            log.warning(
                "role %r runs tether's default image %s on %s: the nodes pull it from its "
                "registry. Build it with `make image` and push it, then set $TETHER_IMAGE "
                "(or --image) to your copy", role.name, DEFAULT_IMAGE, scheduler)


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
