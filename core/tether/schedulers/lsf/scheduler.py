"""The ``lsf`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tether.errors import BackendError
from tether.schedulers import interrupt
from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode
from tether.schedulers.ids import make_app_id
from tether.schedulers.lsf.options import LsfOpts
from tether.schedulers.lsf.render import (
    BACKEND,
    LsfRenderError,
    LsfRequest,
    check,
    decode_description,
    decode_roles,
    default_log_root,
    format_request,
    job_name,
    render,
)
from tether.schedulers.lsf.status import (
    BJOBS_FIELDS,
    LsfJob,
    aggregate,
    parse_bjobs,
    parse_submit,
)
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    ReplicaStatus,
    Role,
    RoleStatus,
)
from tether.specs.status import is_terminal
from tether.workspace.api import WorkspaceMixin

COMMAND_TIMEOUT_S = 120.0
LOG_POLL_S = 2.0
_APP_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
"""What :func:`~tether.schedulers.ids.make_app_id` makes (no ``.`` and no wildcard)."""


class LsfCommandError(BackendError):
    """An LSF command is missing or failed."""

    backend, kind = "lsf", "command"


def run_lsf(cmd: str, args: Sequence[str], stdin: str | None = None) -> str:
    """Runs one LSF command (``bsub``, ``bjobs``, ``bkill``, ``bresume``): the only place
    tether calls LSF.

    Args:
        cmd: The command.
        args: Its arguments.
        stdin: Text for its standard input.

    Returns:
        Its standard output.

    Raises:
        LsfCommandError: When the command is not on PATH or exits non-zero.
    """
    exe = shutil.which(cmd)
    if exe is None:
        raise LsfCommandError(
            f"{cmd!r} is not on PATH: the lsf scheduler runs LSF's commands; source LSF's "
            "profile (e.g. `. $LSF_ENVDIR/profile.lsf`) or add LSF's bin directory to PATH"
        )
    proc = subprocess.run(  # argv list, no shell
        [exe, *args], input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise LsfCommandError(
            f"{cmd} {' '.join(args)} exited with {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()[:1000]}"
        )
    return proc.stdout


def _role_cwd(app: AppDef, opts: LsfOpts) -> str:
    if opts.cwd:
        return os.path.abspath(os.path.expanduser(opts.cwd))
    for role in app.roles:
        ws = role.workspace
        if ws is not None:
            if not ws.is_unmapped_single_project():
                raise LsfRenderError(
                    f"role {role.name!r}: lsf runs the job in one directory; its workspace "
                    f"{str(ws)!r} maps projects"
                )
            return os.path.abspath(os.path.expanduser(next(iter(ws.projects))))
    return os.getcwd()


class LsfScheduler(Scheduler[LsfRequest, LsfOpts], WorkspaceMixin[None]):
    """Runs apps as IBM Spectrum LSF jobs through ``bsub``/``bjobs``/``bkill``.

    Args:
        session_name: The runner's session.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        needs_image=False,
        durable=True,
        workspaces=frozenset({"dir"}),
        streams=frozenset({Stream.COMBINED}),
        log_time_filter=False,
        log_tail=True,
        gang=False,  # each role's replicas start together; the roles' jobs start apart
        elastic=False,
        secrets=False,
        port_map=False,
        # one bjobs for every followed app per interval
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.lsf.watch", interval=5.0),
    )

    def __init__(self, session_name: str) -> None:
        super().__init__(BACKEND, session_name)

    # ---- render and submit -------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: LsfOpts) -> None:
        check(app, opts)
        _role_cwd(app, opts)

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Nothing to build: the job runs in the workspace directory (a shared file system).

        Args:
            role: The role (checked, not changed).
            cfg: Resolved run options.
            build_cache: Unused.
        """

    def _submit_dryrun(self, app: AppDef, opts: LsfOpts) -> AppDryRunInfo[LsfRequest]:
        cwd = _role_cwd(app, opts)
        req = render(app, opts, make_app_id(app.name), default_log_root(opts, cwd), cwd)
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Creates the log directory and submits each role's job with ``bsub``.

        A multi-role app's jobs are submitted held and released together with ``bresume``
        once all exist; when a submission fails, the jobs already submitted are killed.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id (the jobs are named ``<app id>.<role>``).
        """
        req: LsfRequest = dryrun_info.request
        Path(req.log_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        submitted: builtins.list[str] = []
        try:
            for job in req.jobs:
                submitted.append(parse_submit(run_lsf("bsub", [], stdin=job.script)))
            if len(submitted) > 1:
                run_lsf("bresume", submitted)
        except BaseException:
            if submitted:
                with contextlib.suppress(LsfCommandError):
                    run_lsf("bkill", submitted)
            raise
        return req.name

    # ---- query -------------------------------------------------------------------------
    def _bjobs(self, args: Sequence[str]) -> builtins.list[LsfJob]:
        try:
            out = run_lsf("bjobs", ["-o", " ".join(BJOBS_FIELDS), "-json", *args])
        except LsfCommandError as e:
            if "not found" in str(e):
                return []
            raise
        return parse_bjobs(out)

    def _app_jobs(self, app_id: str, role: str | None = None) -> dict[str, LsfJob]:
        """The jobs of an app by role (the newest job of each role), from ``bjobs -J``."""
        if not _APP_ID.match(app_id):
            return {}
        pattern = job_name(app_id, role) if role is not None else f"{app_id}.*"
        by_role: dict[str, LsfJob] = {}
        for job in sorted(self._bjobs(["-a", "-J", pattern]), key=_job_order):
            meta = decode_description(job.description)
            name = (meta or {}).get("role", "")
            if meta is not None and job.name == job_name(app_id, name):
                by_role[name] = job
        return by_role

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the app from its roles' jobs (``bjobs``) and the replicas' exit files.

        Args:
            app_id: The app id.

        Returns:
            The description, or None when LSF knows no job of the app.
        """
        jobs = self._app_jobs(app_id)
        return self.describe_jobs(app_id, jobs) if jobs else None

    def apps_jobs(self, app_ids: Collection[str]) -> dict[str, dict[str, LsfJob]]:
        """One ``bjobs -a`` (the user's jobs) for several apps at once (the watch hub's read).

        Args:
            app_ids: The app ids.

        Returns:
            Each app's jobs by role (the newest job of each role); an app without a job is
            absent.
        """
        wanted = set(app_ids)
        out: dict[str, dict[str, LsfJob]] = {}
        for job in sorted(self._bjobs(["-a"]), key=_job_order):
            meta = decode_description(job.description)
            app_id, dot, role = job.name.partition(".")
            if meta is not None and dot and app_id in wanted and role == meta.get("role"):
                out.setdefault(app_id, {})[role] = job
        return out

    def describe_jobs(self, app_id: str, jobs: Mapping[str, LsfJob]) -> DescribeAppResponse:
        """What :meth:`describe` answers for an app whose jobs ``bjobs`` already showed.

        Args:
            app_id: The app id.
            jobs: Its jobs by role (at least one).

        Returns:
            The description.
        """
        meta = decode_description(next(iter(jobs.values())).description) or {}
        roles = decode_roles(meta.get("roles", ""))
        msgs: builtins.list[str] = []
        statuses: builtins.list[RoleStatus] = []
        for name, n in roles.items():
            job = jobs.get(name)
            if job is None:
                msgs.append(f"role {name!r} has no LSF job (its submission was interrupted)")
            elif job.reason:
                msgs.append(f"role {name!r}: {job.reason}")
            rstate = job.state if job is not None else AppState.UNKNOWN
            reps = []
            for k in range(n):
                code = _exit_code(meta.get("logs", ""), name, k)
                if code:
                    msgs.append(f"role {name!r} replica {k} exited with code {code}")
                reps.append(ReplicaStatus(k, _replica_state(rstate, code), name,
                                          exit_code=code))
            statuses.append(RoleStatus(name, reps))
        state = aggregate([j.state for j in jobs.values()], missing=len(jobs) < len(roles))
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=0,
            msg="; ".join(msgs),
            roles=[Role(name=n, num_replicas=c) for n, c in roles.items()],
            roles_statuses=statuses,
            job_key=meta.get("key"),
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The apps of the user that tether submitted (jobs grouped by the app id in their
        names, read from their descriptions).

        Args:
            cfg: Unused.

        Returns:
            The apps, oldest first (by their first job id, i.e. submission order).
        """
        apps: dict[str, builtins.list[tuple[LsfJob, dict[str, str]]]] = {}
        for job in sorted(self._bjobs(["-a"]), key=_job_order):
            meta = decode_description(job.description)
            app_id, dot, role = job.name.partition(".")
            if meta is not None and dot and role == meta.get("role"):
                apps.setdefault(app_id, []).append((job, meta))
        out: builtins.list[ListAppResponse] = []
        for app_id, jobs in apps.items():
            by_role = {meta["role"]: job for job, meta in jobs}
            meta = jobs[0][1]
            roles = decode_roles(meta.get("roles", ""))
            state = aggregate([j.state for j in by_role.values()],
                              missing=len(by_role) < len(roles))
            first = jobs[0][0].job_id
            out.append(ListAppResponse(app_id=app_id, state=state, name=meta.get("app", ""),
                                       job_key=meta.get("key"),
                                       created=float(first) if first.isdigit() else None))
        return out

    # ---- logs --------------------------------------------------------------------------
    def _log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int,
        regex: str | None,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
        streams: Stream,
    ) -> Iterable[str]:
        jobs = self._app_jobs(app_id)
        if not jobs:
            raise ValueError(f"lsf app {app_id!r} does not exist")
        meta = decode_description(next(iter(jobs.values())).description) or {}
        roles = decode_roles(meta.get("roles", ""))
        if role_name not in roles or not 0 <= k < roles[role_name]:
            raise ValueError(f"lsf app {app_id!r} has no replica {role_name}/{k}")
        path = Path(meta.get("logs", ""), role_name, f"{k}.log")
        return filter_regex(regex, self._follow(app_id, role_name, path, should_tail))

    def _follow(self, app_id: str, role: str, path: Path, should_tail: bool) -> Iterator[str]:
        """The lines of one replica's log; with ``should_tail``, until its role's job ends."""
        pos = 0
        while True:
            job = self._app_jobs(app_id, role).get(role) if should_tail else None
            finished = job is None or is_terminal(job.state)
            if path.exists():
                with path.open("rb") as f:
                    f.seek(pos)
                    data = f.read()
                end = data.rfind(b"\n") + 1 if not finished else len(data)
                for line in data[:end].decode("utf-8", "replace").splitlines():
                    yield line + "\n"
                pos += end
            if finished:
                return
            interrupt.pause(LOG_POLL_S)

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        ids = [j.job_id for j in self._app_jobs(app_id).values() if not is_terminal(j.state)]
        if not ids:
            return
        try:
            run_lsf("bkill", ids)
        except LsfCommandError as e:
            if "already finished" not in str(e) and "No matching job" not in str(e):
                raise


def _job_order(job: LsfJob) -> tuple[int, str]:
    return (int(job.job_id) if job.job_id.isdigit() else 0, job.job_id)


def _replica_state(role_state: AppState, code: int | None) -> AppState:
    if code is None:
        return role_state
    return AppState.SUCCEEDED if code == 0 else AppState.FAILED


def _exit_code(log_dir: str, role: str, k: int) -> int | None:
    if not log_dir:
        return None
    try:
        return int(Path(log_dir, role, f"{k}.exit").read_text().strip())
    except (OSError, ValueError):
        return None


def create_scheduler(session_name: str, **kwargs: Any) -> LsfScheduler:
    """Creates the ``lsf`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: None accepted.

    Returns:
        The scheduler.
    """
    return LsfScheduler(session_name, **kwargs)
