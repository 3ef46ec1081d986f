"""The ``lsf`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tether.errors import BackendError
from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities
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
    render,
)
from tether.schedulers.lsf.status import BJOBS_FIELDS, LsfJob, parse_bjobs, parse_submit
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


class LsfCommandError(BackendError):
    """An LSF command is missing or failed."""

    backend, kind = "lsf", "command"


def run_lsf(cmd: str, args: Sequence[str], stdin: str | None = None) -> str:
    """Runs one LSF command (``bsub``, ``bjobs``, ``bkill``): the only place tether calls LSF.

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
        gang=True,
        elastic=False,
        secrets=False,
        port_map=False,
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
        """Creates the log directory and submits the script with ``bsub``.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The LSF job id.
        """
        req: LsfRequest = dryrun_info.request
        Path(req.log_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        return parse_submit(run_lsf("bsub", [], stdin=req.script))

    # ---- query -------------------------------------------------------------------------
    def _bjobs(self, args: Sequence[str]) -> list[LsfJob]:
        return parse_bjobs(run_lsf("bjobs", ["-o", " ".join(BJOBS_FIELDS), "-json", *args]))

    def _job(self, app_id: str) -> LsfJob | None:
        for job in self._bjobs(["-a", app_id]):
            if job.job_id == app_id:
                return job
        return None

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the job from ``bjobs`` and the replicas' exit files.

        Args:
            app_id: The LSF job id.

        Returns:
            The description, or None when LSF does not know the job.
        """
        job = self._job(app_id)
        if job is None:
            return None
        meta = decode_description(job.description) or {}
        roles = decode_roles(meta.get("roles", ""))
        state = job.state
        msgs = [job.reason] if job.reason else []
        statuses: list[RoleStatus] = []
        for name, n in roles.items():
            reps = []
            for k in range(n):
                code = _exit_code(meta.get("logs", ""), name, k)
                rstate = state
                if code is not None:
                    rstate = AppState.SUCCEEDED if code == 0 else AppState.FAILED
                    if code != 0:
                        msgs.append(f"role {name!r} replica {k} exited with code {code}")
                reps.append(ReplicaStatus(k, rstate, name, exit_code=code))
            statuses.append(RoleStatus(name, reps))
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
        """The LSF jobs of the user that tether submitted (by job description).

        Args:
            cfg: Unused.

        Returns:
            The apps, in LSF's order (by job id, i.e. submission order).
        """
        out: builtins.list[ListAppResponse] = []
        for job in self._bjobs(["-a"]):
            meta = decode_description(job.description)
            if meta is None:
                continue
            out.append(ListAppResponse(app_id=job.job_id, state=job.state,
                                       name=meta.get("app", ""), job_key=meta.get("key"),
                                       created=float(job.job_id) if job.job_id.isdigit() else None))
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
        desc_job = self._job(app_id)
        if desc_job is None:
            raise ValueError(f"lsf job {app_id!r} does not exist")
        meta = decode_description(desc_job.description) or {}
        roles = decode_roles(meta.get("roles", ""))
        if role_name not in roles or not 0 <= k < roles[role_name]:
            raise ValueError(f"lsf job {app_id!r} has no replica {role_name}/{k}")
        path = Path(meta.get("logs", ""), role_name, f"{k}.log")
        return filter_regex(regex, self._follow(app_id, path, should_tail))

    def _follow(self, app_id: str, path: Path, should_tail: bool) -> Iterator[str]:
        pos = 0
        while True:
            job = self._job(app_id) if should_tail else None
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
            time.sleep(LOG_POLL_S)

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        try:
            run_lsf("bkill", [app_id])
        except LsfCommandError as e:
            if "already finished" not in str(e) and "No matching job" not in str(e):
                raise


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
