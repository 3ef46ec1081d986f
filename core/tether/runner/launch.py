"""The launch path of the Runner: render a job, submit it, or find the one already launched.

:class:`Launcher` renders the native request (:meth:`Launcher.dryrun`), submits it
(:meth:`Launcher.schedule`), finds the newest job launched with a job key
(:meth:`Launcher.find_job`) and decides between submitting and re-attaching
(:meth:`Launcher.run_or_attach`, by the one rule of :mod:`tether.runner.reattach`); an app
with a recovery policy, or a list of schedulers, is handed to the logical jobs
(:class:`~tether.runner.chains.Chains`). :class:`~tether.runner.api.Runner` holds one and hands
its ``dryrun``, ``schedule``, ``find_job`` and ``run_or_attach`` on to it. ``dryrun`` and
``schedule`` record their runner events here (:func:`~tether.runner.recording.recorded`), so
an attempt a chain submits through the Runner records them too.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.runner.pool import SchedulerPool
from tether.runner.recording import app_fields, handle_fields, recorded
from tether.runner.wiring import warn_default_image, wire_env
from tether.schedulers.api import JOB_KEY, ListAppResponse
from tether.specs import AppDef, AppDryRunInfo, AppHandle, CfgVal, make_app_handle
from tether.workspace import Workspace
from tether.workspace.api import WorkspaceMixin

if TYPE_CHECKING:
    from tether.runner.chains import Chains
    from tether.runner.reattach import ExistingJob, RunOutcome
    from tether.specs import AppStatus

log: logging.Logger = logging.getLogger("tether.runner.api")  # the Runner's log, as before


def has_chain(job_key: str) -> bool:
    """Whether a logical job has a journal under ``job_key`` (without loading chains).

    Args:
        job_key: The identity.

    Returns:
        Whether its journal exists.
    """
    from tether.runner.journal import Journal

    return Journal(job_key).path.exists()


class Launcher:
    """Renders, submits, and finds or re-attaches to jobs for a Runner.

    Args:
        pool: The Runner's schedulers (and its ``.tetherconfig``).
        name: The session name, part of every handle.
        chains: The Runner's logical jobs (called only when one is met, so that a dry run
            does not load them).
        status: The Runner's status of an app (recorded, followed by the watch hub).
    """

    def __init__(
        self,
        pool: SchedulerPool,
        name: str,
        chains: Callable[[], Chains],
        status: Callable[[AppHandle], AppStatus | None],
    ) -> None:
        self._pool = pool
        self._name = name
        self._chains = chains
        self._status = status

    @recorded("dryrun", lambda self, app, scheduler, cfg=None, workspace=None, *a, **k:
              app_fields(app, scheduler, cfg, workspace))  # fmt: skip
    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """Renders the native request without submitting it (see ``Runner.dryrun``)."""
        sched = self._pool.get(scheduler)
        config = self._pool.config
        # a copy, but overrides are not deep-copied (as TorchX): they may hold coroutines or
        # futures; each role's copy gets its own dict of the same values
        app = copy.deepcopy(app, {id(r.overrides): dict(r.overrides) for r in app.roles})
        wire_env(app, scheduler, self._name, config, parent_run_id, job_key)
        if job_key:
            app.metadata[JOB_KEY] = job_key
        ws = Workspace.from_str(workspace) if isinstance(workspace, str) else workspace
        if ws is not None:
            for role in app.roles:
                if role.workspace is None:
                    role.workspace = ws
        warn_default_image(app, scheduler, sched.capabilities)
        opts = sched.run_opts()
        merged = config.apply(scheduler, cfg, opts)
        if isinstance(sched, WorkspaceMixin) and any(r.workspace is not None for r in app.roles):
            sched.build_workspaces(app.roles, opts.resolve(merged, scheduler))
        info = sched.submit_dryrun(app, merged)
        # schedule() finds the scheduler by the name this runner knows it under (a plugin's
        # registered name may differ from its ``backend``)
        info.scheduler = scheduler
        return info

    @recorded("schedule", lambda self, info: app_fields(info.app, info.scheduler, info.cfg),
              after=handle_fields)  # fmt: skip
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle:
        """Submits a request rendered by :meth:`dryrun` (see ``Runner.schedule``)."""
        backend = dryrun_info.scheduler
        if backend is None:
            raise ValueError("dryrun_info was not produced by Runner.dryrun/submit_dryrun")
        sched = self._pool.get(backend)
        app_id = sched.schedule(dryrun_info)
        handle = make_app_handle(backend, self._name, app_id)
        if dryrun_info.app is not None:
            self._pool.remember(handle, dryrun_info.app)
        app_name = dryrun_info.app.name if dryrun_info.app else "?"
        log.info("launched app %s as %s", app_name, handle)
        return handle

    def find_job(
        self, scheduler: str, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> ExistingJob | None:
        """The newest job submitted with identity ``job_key`` (see ``Runner.find_job``)."""
        from tether.runner.reattach import ExistingJob  # not on a dry run's path

        chain = self._chains().find(job_key) if has_chain(job_key) else None
        if chain is not None:
            return chain
        sched = self._pool.get(scheduler)
        merged = self._pool.config.apply(scheduler, cfg, sched.run_opts())
        found: list[ListAppResponse] = sched.find_jobs(job_key, merged)
        for entry in reversed(found):
            handle = make_app_handle(scheduler, self._name, entry.app_id)
            status = self._status(handle)
            if status is not None:
                return ExistingJob(handle, status)
        return None

    def run_or_attach(
        self,
        app: AppDef,
        scheduler: str | Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
    ) -> RunOutcome:
        """Submits ``app`` unless a job with the same identity already exists (see
        ``Runner.run_or_attach``)."""
        from tether.runner.reattach import Action, EarlierJob, RunOutcome, decide

        if not isinstance(scheduler, str) or app.recovery is not None:
            names = [scheduler] if isinstance(scheduler, str) else list(scheduler)
            return self._chains().start(app, names, cfg, workspace, parent_run_id, job_key)
        if job_key:
            existing = self.find_job(scheduler, job_key, cfg)
            earlier = None if existing is None else EarlierJob(existing.app_handle,
                                                               existing.status)
            decision = decide(earlier)
            if existing is not None and decision.action is Action.ATTACH:
                log.info("job key %r: re-attaching to %s instead of submitting a duplicate (%s)",
                         job_key, existing.app_handle, decision.reason)
                return RunOutcome(existing.app_handle, reattached=True)
        info = self.dryrun(app, scheduler, cfg, workspace, parent_run_id, job_key)
        return RunOutcome(self.schedule(info), reattached=False)
