"""``local_cwd``: the embedded default scheduler, running every replica as a local process.

Each replica is a subprocess in its own process group, started in the current directory (or
the ``cwd`` run option, or the role's workspace directory) as ``[entrypoint, *args]`` with the
launcher's environment plus the role's ``env`` and ``TETHER_ROLE_NAME``,
``TETHER_REPLICA_ID`` and ``TETHER_RANK0_HOST=localhost``. Macros are filled per replica.

Apps are durable: ``schedule`` writes the app's record under ``$TETHER_STATE_DIR/local_cwd``
(see :mod:`tether.schedulers.local_state`) and starts a detached supervisor process
(:mod:`tether.schedulers.local_supervisor`) that runs the replicas, tees their logs, applies
retries and records every change. ``describe``, ``log_iter``, ``cancel`` and ``list`` read
that record, so they work from any process and after the launcher exited. When the
supervisor died (say, SIGKILL), ``describe`` notices it, stops the processes it left and
marks the app FAILED with the reason, so no app stays RUNNING forever.

Retries: a failed replica of a role with ``max_retries`` left restarts per the role's
``retry_policy``: ``REPLICA`` restarts only that replica (each replica has its own
``max_retries``), ``ROLE`` restarts the role's replicas and ``APPLICATION`` every replica
(both count retries per failing role). Logs of restarted replicas are appended to, after a
``[tether] restarting ...`` line in ``stderr.log`` and ``combined.log``.

Processes: when a replica's main process exits, what is left of its process group is stopped
(as a container runtime does), and processes that left the group (``setsid``) are stopped when
the app ends (the supervisor is their subreaper). ``cancel`` stops every process group of the
app: SIGTERM, then SIGKILL after ``grace_period``.

Logs: ``stdout.log``, ``stderr.log`` and ``combined.log`` per replica. The supervisor keeps a
small time index next to each (one entry per 10 ms of output at most), so ``since``/``until``
select lines by the time they were received, though the lines themselves carry no timestamp.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import dataclasses
import difflib
import hashlib
import io
import itertools
import logging
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tether.schedulers.api import (
    JOB_KEY,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
)
from tether.schedulers.gpus import host_gpu_count
from tether.schedulers.local_state import (
    INDEX_SUFFIX,
    SUPERVISOR_LOG,
    AppRecord,
    ReplicaRecord,
    StateStore,
    app_from_json,
    app_to_json,
    read_index,
)
from tether.schedulers.local_supervisor import (
    pid_alive,
    stderr_tail,
    stop_groups,
)
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    ReplicaStatus,
    Role,
    RoleStatus,
    StructuredOpts,
    macros,
    mask_env,
)
from tether.workspace.api import WorkspaceMixin

log = logging.getLogger(__name__)

BACKEND = "local_cwd"
ENV_ROLE_NAME = "TETHER_ROLE_NAME"
ENV_REPLICA_ID = "TETHER_REPLICA_ID"
ENV_RANK0_HOST = "TETHER_RANK0_HOST"
ENV_CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

DEFAULT_GRACE_PERIOD_S = 5.0
SUPERVISOR_START_TIMEOUT_S = 120.0
"""How long ``schedule`` waits for the supervisor to report the replicas started."""
CANCEL_EXTRA_WAIT_S = 10.0
"""Beyond the grace period, how long ``cancel`` waits for the supervisor to stop the app."""
DEAD_SUPERVISOR_GRACE_S = 1.0
"""Grace period for processes left behind by a dead supervisor (``describe`` stops them)."""
LOG_READ_CHUNK = 4 * 1024 * 1024
"""Bytes read from a log file at a time."""
LOG_POLL_S = 0.1
"""How often a tailing reader looks for new log data."""
MAX_LOG_LINE = 64 * 1024 * 1024
"""A reader yields a line at most this long (longer ones are split)."""

# ---- options -----------------------------------------------------------------------------


@dataclass
class LocalOpts(StructuredOpts):
    """Run options of ``local_cwd``."""

    log_dir: str | None = None
    """Directory for the replicas' logs (``<log_dir>/<app_id>/<role>/<replica>/``); default:
    the app's directory under ``$TETHER_STATE_DIR/local_cwd``."""

    cwd: str | None = None
    """Working directory of the replicas (default: the current directory); a role's
    workspace directory takes precedence."""

    auto_set_cuda_visible_devices: bool = False
    """Give each replica of a GPU role its own ``CUDA_VISIBLE_DEVICES`` (consecutive devices of
    this host, ``resource.gpu`` per replica)."""

    grace_period: float = DEFAULT_GRACE_PERIOD_S
    """Seconds between SIGTERM and SIGKILL when stopping a replica's processes."""


# ---- render ------------------------------------------------------------------------------


@dataclass
class ReplicaRequest:
    """How one replica is started.

    Attributes:
        role: The role's name.
        replica_id: The replica's index.
        argv: The command, macros substituted (no shell).
        env: Variables set on top of the launcher's environment.
        cwd: The working directory.
        stdout: Path of the stdout log.
        stderr: Path of the stderr log.
        combined: Path of the combined log (both streams, whole lines).
    """

    role: str
    replica_id: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdout: str
    stderr: str
    combined: str


@dataclass
class LocalRequest:
    """The native request of ``local_cwd``: every replica of an app.

    Attributes:
        app_id: The app's id (chosen at render time).
        app_name: The app's name.
        log_dir: The app's log directory.
        grace_period: Seconds between SIGTERM and SIGKILL.
        roles: The replicas of each role, in app order.
    """

    app_id: str
    app_name: str
    log_dir: str
    grace_period: float
    roles: dict[str, list[ReplicaRequest]] = field(default_factory=dict)

    def replicas(self) -> list[ReplicaRequest]:
        """Every replica, role by role."""
        return [r for reps in self.roles.values() for r in reps]


def format_request(req: LocalRequest) -> str:
    """Renders a request readably, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    lines = [
        f"local_cwd app {req.app_id} ({req.app_name})",
        f"  logs: {req.log_dir}",
        f"  grace period: {req.grace_period:g}s",
    ]
    for role, reps in req.roles.items():
        lines.append(f"  role {role}: {len(reps)} replica(s)")
        for r in reps:
            lines.append(f"    [{r.replica_id}] {shlex.join(r.argv)}")
            lines.append(f"        cwd: {r.cwd}")
            for k, v in sorted(mask_env(r.env).items()):
                lines.append(f"        env: {k}={v}")
            lines.append(f"        logs: {os.path.dirname(r.combined)}/")
    return "\n".join(lines)


_NAME_JUNK = re.compile(r"[^a-z0-9]+")
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_SAFE_DIR = re.compile(r"^[A-Za-z0-9_.-]+$")


def make_app_id(app_name: str) -> str:
    """A new app id: ``{sanitized app name}-{8 random characters}`` (file-name safe).

    Args:
        app_name: The app's name.

    Returns:
        The id, e.g. ``my-train-k3x9q0ab``.
    """
    base = _NAME_JUNK.sub("-", app_name.lower()).strip("-")[:40].strip("-") or "app"
    suffix = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
    return f"{base}-{suffix}"


def _role_dir(role_name: str) -> str:
    if _SAFE_DIR.match(role_name) and role_name not in (".", ".."):
        return role_name
    digest = hashlib.sha1(role_name.encode()).hexdigest()[:8]  # noqa: S324 - a name, no security
    return f"{_NAME_JUNK.sub('-', role_name.lower()).strip('-') or 'role'}-{digest}"


def role_cwd(role: Role, default_cwd: str) -> str:
    """The directory a role's replicas run in: its workspace directory, else ``default_cwd``.

    Args:
        role: The role.
        default_cwd: The ``cwd`` run option or the current directory.

    Returns:
        An absolute path.

    Raises:
        ValueError: When the workspace is not a single unmapped directory.
    """
    ws = role.workspace
    if ws is None:
        return os.path.abspath(default_cwd)
    if not ws.is_unmapped_single_project():
        raise ValueError(
            f"role {role.name!r}: local_cwd runs replicas in one directory, but its workspace "
            f"{str(ws)!r} maps {len(ws.projects)} project(s) to "
            f"{sorted(ws.projects.values())}; use a single directory (e.g. --workspace ./)"
        )
    return os.path.abspath(os.path.expanduser(next(iter(ws.projects))))


_NO_AUTOSET_WARNING = """
======================================================================
{replicas} replica(s) of this app ask for GPUs, but `CUDA_VISIBLE_DEVICES`
is not set for them, so they may all use the same devices (and run out
of GPU memory). To give each replica its own GPUs of this host, run with
the run option `auto_set_cuda_visible_devices=True`.
======================================================================"""

_TOO_FEW_GPUS_WARNING = """
======================================================================
Not setting `CUDA_VISIBLE_DEVICES`: this host has {available} GPU(s) but
the app's replicas ask for {requested} in total. Ask for fewer GPUs or
run on a host with more.
======================================================================"""


def auto_set_cuda_visible_devices(
    roles: Mapping[str, list[ReplicaRequest]],
    app: AppDef,
    enabled: bool,
    device_count: Callable[[], int],
) -> None:
    """Splits the host's GPUs among the replicas of the GPU roles (``CUDA_VISIBLE_DEVICES``).

    Devices are handed out in order, role by role and replica by replica, ``resource.gpu``
    each; roles without GPUs are skipped. The variable overrides a value in the role's env.
    Nothing is set (with a warning) when the option is off while replicas ask for GPUs, or
    when the host has fewer GPUs than the replicas ask for in total. On a host with 8 GPUs,
    roles ``a`` (1 replica, 2 GPUs) and ``b`` (3 replicas, 1 GPU) get ``a[0]=0,1``,
    ``b[0]=2``, ``b[1]=3``, ``b[2]=4``.

    Args:
        roles: The replicas of each role (their ``env`` is updated).
        app: The app (for the roles' GPU counts).
        enabled: The ``auto_set_cuda_visible_devices`` run option.
        device_count: Returns the number of GPUs of the host (called only when needed).
    """
    gpu_roles = [r for r in app.roles if r.resource.gpu > 0]
    requested = sum(r.resource.gpu * r.num_replicas for r in gpu_roles)
    if requested <= 0:
        return
    if not enabled:
        n = sum(r.num_replicas for r in gpu_roles)
        log.warning(_NO_AUTOSET_WARNING.format(replicas=n))
        return
    available = device_count()
    if requested > available:
        log.warning(_TOO_FEW_GPUS_WARNING.format(available=available, requested=requested))
        return
    start = 0
    for role in gpu_roles:
        for rep in roles[role.name]:
            end = start + role.resource.gpu
            rep.env[ENV_CUDA_VISIBLE_DEVICES] = ",".join(str(i) for i in range(start, end))
            start = end


def _opts(cfg: Mapping[str, CfgVal]) -> LocalOpts:
    names = {f.name for f in dataclasses.fields(LocalOpts)}
    return LocalOpts(**{k: v for k, v in cfg.items() if k in names})  # type: ignore[arg-type]


# ---- the scheduler -----------------------------------------------------------------------


class LocalScheduler(Scheduler[LocalRequest], WorkspaceMixin[None]):
    """Runs apps as local processes, durably (see the module docs).

    Args:
        session_name: The runner's session.
        state_dir: Tether's state directory (default ``$TETHER_STATE_DIR`` or
            ``~/.local/state/tether``).
        gpu_count: The host's GPU count, or a function returning it (default: asked of the
            NVIDIA driver); mostly for tests.
    """

    def __init__(
        self,
        session_name: str,
        state_dir: str | Path | None = None,
        gpu_count: int | Callable[[], int] | None = None,
    ) -> None:
        super().__init__(BACKEND, session_name)
        self._store = StateStore(state_dir)
        self._gpu_count = gpu_count
        self._gpu_cache: int | None = None

    @property
    def store(self) -> StateStore:
        """Where the app records live."""
        return self._store

    def _opts_class(self) -> type[StructuredOpts]:
        return LocalOpts

    def device_count(self) -> int:
        """The number of GPUs ``auto_set_cuda_visible_devices`` divides (cached).

        Returns:
            The injected count, or the host's.
        """
        if self._gpu_cache is None:
            gc = self._gpu_count
            if gc is None:
                self._gpu_cache = host_gpu_count()
            elif callable(gc):
                self._gpu_cache = int(gc())
            else:
                self._gpu_cache = int(gc)
        return self._gpu_cache

    # ---- render ------------------------------------------------------------------------
    def _validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        opts = _opts(cfg)
        if opts.cwd is not None and not os.path.isdir(os.path.expanduser(opts.cwd)):
            raise ValueError(f"run option cwd={opts.cwd!r} is not a directory")
        if opts.grace_period < 0:
            raise ValueError(f"run option grace_period must be >= 0, got {opts.grace_period}")
        default_cwd = os.path.expanduser(opts.cwd) if opts.cwd else os.getcwd()
        for role in app.roles:
            cwd = role_cwd(role, default_cwd)
            if not os.path.isdir(cwd):
                raise ValueError(f"role {role.name!r}: working directory {cwd!r} does not exist")
            self._check_entrypoint(role, cwd)

    @staticmethod
    def _check_entrypoint(role: Role, cwd: str) -> None:
        ep = role.entrypoint
        if os.sep in ep:
            path = os.path.join(cwd, os.path.expanduser(ep))
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ValueError(
                    f"role {role.name!r}: entrypoint {ep!r} is not an executable file "
                    f"(looked at {path!r})"
                )
            return
        search = role.env.get("PATH", os.environ.get("PATH", os.defpath))
        if shutil.which(ep, path=search) is None:
            raise ValueError(
                f"role {role.name!r}: entrypoint {ep!r} is not found on PATH ({search}); "
                "give a program on PATH or a path to an executable"
            )

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Nothing to build: the replicas run in the workspace directory itself.

        Args:
            role: The role (checked, not changed).
            cfg: Resolved run options.
            build_cache: Unused.
        """
        role_cwd(role, os.getcwd())

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal]
    ) -> AppDryRunInfo[LocalRequest]:
        opts = _opts(cfg)
        app_id = make_app_id(app.name)
        if opts.log_dir:
            log_dir = Path(opts.log_dir).expanduser().absolute() / app_id
        else:
            log_dir = self._store.apps_dir.absolute() / app_id / "logs"
        default_cwd = os.path.expanduser(opts.cwd) if opts.cwd else os.getcwd()
        req = LocalRequest(app_id, app.name, str(log_dir), float(opts.grace_period))
        for role in app.roles:
            cwd = role_cwd(role, default_cwd)
            reps: list[ReplicaRequest] = []
            for i in range(role.num_replicas):
                values = macros.Values(
                    img_root=cwd, app_id=app_id, replica_id=str(i), rank0_env=ENV_RANK0_HOST
                )
                r = values.apply(role)
                env = dict(r.env)
                env.update(
                    {ENV_ROLE_NAME: role.name, ENV_REPLICA_ID: str(i), ENV_RANK0_HOST: "localhost"}
                )
                rdir = log_dir / _role_dir(role.name) / str(i)
                reps.append(
                    ReplicaRequest(
                        role=role.name,
                        replica_id=i,
                        argv=[r.entrypoint, *r.args],
                        env=env,
                        cwd=cwd,
                        stdout=str(rdir / "stdout.log"),
                        stderr=str(rdir / "stderr.log"),
                        combined=str(rdir / "combined.log"),
                    )
                )
            req.roles[role.name] = reps
        auto_set_cuda_visible_devices(
            req.roles, app, bool(opts.auto_set_cuda_visible_devices), self.device_count
        )
        return AppDryRunInfo(req, format_request)

    # ---- submit ------------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Starts the app's supervisor and returns once the replicas were started.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id.

        Raises:
            ValueError: When the request was already submitted or did not come from
                ``submit_dryrun``.
            RuntimeError: When the supervisor could not start (with its log).
        """
        req = dryrun_info.request
        app = dryrun_info._app
        if not isinstance(req, LocalRequest) or app is None:
            raise ValueError(
                "LocalScheduler.schedule() takes the AppDryRunInfo returned by "
                "submit_dryrun() of a local_cwd scheduler"
            )
        app_dir = self._store.apps_dir / req.app_id
        job_key = app.metadata.get(JOB_KEY)
        record = AppRecord(
            app_id=req.app_id,
            name=app.name,
            session=self.session_name,
            created=time.time(),
            job_key=str(job_key) if job_key is not None else None,
            app=app_to_json(app),
            cfg=dict(dryrun_info._cfg or {}),
            log_dir=req.log_dir,
            grace_period=req.grace_period,
            supervisor_log=str(app_dir / SUPERVISOR_LOG),
            replicas=[
                ReplicaRecord(
                    role=r.role,
                    replica_id=r.replica_id,
                    argv=list(r.argv),
                    env=dict(r.env),
                    cwd=r.cwd,
                    stdout=r.stdout,
                    stderr=r.stderr,
                    combined=r.combined,
                )
                for r in req.replicas()
            ],
        )
        try:
            self._store.create(record)
        except FileExistsError:
            raise ValueError(
                f"app {req.app_id!r} was already submitted; render a new request with "
                "submit_dryrun() to run the app again"
            ) from None
        for r in req.replicas():
            Path(r.combined).parent.mkdir(parents=True, exist_ok=True)
        self._start_supervisor(record, app_dir)
        return req.app_id

    def _start_supervisor(self, record: AppRecord, app_dir: Path) -> None:
        ready_r, ready_w = os.pipe()
        try:
            with open(record.supervisor_log, "ab") as slog:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tether.schedulers.local_supervisor",
                        str(self._store.state_path(record.app_id)),
                        "--ready-fd",
                        str(ready_w),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=slog,
                    stderr=subprocess.STDOUT,
                    cwd=app_dir,
                    start_new_session=True,
                    pass_fds=(ready_w,),
                )
        except BaseException:
            os.close(ready_r)
            os.close(ready_w)
            self._mark_failed(record.app_id, "could not start the supervisor process")
            raise
        os.close(ready_w)
        try:
            ready = _wait_readable(ready_r, SUPERVISOR_START_TIMEOUT_S) and os.read(ready_r, 1)
        finally:
            os.close(ready_r)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)  # the supervisor forked away at once; reap its first half
        if ready:
            return
        rec = self._store.load(record.app_id)
        if rec is None or rec.app_state.is_terminal():
            return  # e.g. cancelled by another process while starting
        if rec.supervisor_pid is not None:
            if pid_alive(rec.supervisor_pid, rec.supervisor_start_time):
                self._cancel_existing(record.app_id)  # too slow: stop it and what it started
            else:
                self._load(record.app_id)  # it died: stop what it started, record why
        tail = stderr_tail(record.supervisor_log, lines=20)
        self._mark_failed(record.app_id, f"the supervisor did not start:\n{tail}")
        raise RuntimeError(
            f"the local_cwd supervisor of app {record.app_id!r} did not start the replicas "
            f"(see {record.supervisor_log}):\n{tail}"
        )

    def _mark_failed(self, app_id: str, msg: str) -> None:
        with self._store.lock(app_id):
            rec = self._store.load(app_id)
            if rec is None or rec.app_state.is_terminal():
                return
            rec.state = AppState.FAILED.name
            rec.msg = msg
            rec.finished_at = time.time()
            for rep in rec.replicas:
                if not rep.app_state.is_terminal():
                    rep.state = AppState.FAILED.name
                    rep.msg = msg
            self._store.save(rec)

    # ---- describe ----------------------------------------------------------------------
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app from its durable record.

        Args:
            app_id: The app id.

        Returns:
            The description, or None when there is no such app.
        """
        rec = self._load(app_id)
        if rec is None:
            return None
        roles: dict[str, RoleStatus] = {}
        for rep in rec.replicas:
            rs = roles.setdefault(rep.role, RoleStatus(rep.role))
            rs.replicas.append(
                ReplicaStatus(
                    id=rep.replica_id,
                    state=rep.app_state,
                    role=rep.role,
                    hostname="localhost",
                    exit_code=rep.exit_code,
                    msg=rep.msg,
                )
            )
        return DescribeAppResponse(
            app_id=rec.app_id,
            state=rec.app_state,
            num_restarts=rec.num_restarts,
            msg=rec.msg,
            roles_statuses=list(roles.values()),
            roles=app_from_json(rec.app).roles,
            job_key=rec.job_key,
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """Every app recorded in the state directory, oldest first.

        Args:
            cfg: Unused.

        Returns:
            The apps.
        """
        return self._listing(self._store.app_ids())

    def find_jobs(self, job_key: str) -> builtins.list[ListAppResponse]:
        """The apps submitted with ``job_key``, oldest first (from the job index).

        Args:
            job_key: The job identity.

        Returns:
            The apps.
        """
        return [a for a in self._listing(self._store.job_app_ids(job_key)) if a.job_key == job_key]

    def _listing(self, app_ids: Iterable[str]) -> builtins.list[ListAppResponse]:
        out: builtins.list[ListAppResponse] = []
        for app_id in app_ids:
            try:
                rec = self._load(app_id)
            except (OSError, ValueError) as e:
                log.warning("skipping unreadable local_cwd record of app %s: %s", app_id, e)
                continue
            if rec is not None:
                out.append(
                    ListAppResponse(
                        app_id=rec.app_id,
                        state=rec.app_state,
                        name=rec.name,
                        job_key=rec.job_key,
                        created=rec.created,
                    )
                )
        return sorted(out, key=lambda a: (a.created or 0.0, a.app_id))

    def wait_for_change(self, app_id: str, timeout: float) -> None:
        """Blocks until the app's supervisor exits (the app ended) or ``timeout`` passed.

        Uses a pidfd on the supervisor, so it returns within milliseconds of the app's end;
        without pidfd support it polls every 20 ms.

        Args:
            app_id: The app.
            timeout: The most seconds to block.
        """
        rec = self._store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return
        if rec.supervisor_pid is None:
            time.sleep(min(timeout, 0.05))
            return
        _wait_pid_exit(rec.supervisor_pid, rec.supervisor_start_time, timeout)

    def _load(self, app_id: str) -> AppRecord | None:
        """The app's record, with a dead supervisor's unfinished app resolved."""
        rec = self._store.load(app_id)
        if rec is None or rec.app_state.is_terminal() or self._supervised(rec):
            return rec
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self._store.lock(app_id))
            except FileNotFoundError:
                return None  # deleted meanwhile
            rec = self._store.load(app_id)
            if rec is None or rec.app_state.is_terminal() or self._supervised(rec):
                return rec
            self._resolve_unsupervised(rec)
            self._store.save(rec)
            return rec

    @staticmethod
    def _supervised(rec: AppRecord) -> bool:
        if rec.supervisor_pid is None:
            # the launcher is still starting the supervisor (or died doing so)
            return time.time() - rec.created < SUPERVISOR_START_TIMEOUT_S
        return pid_alive(rec.supervisor_pid, rec.supervisor_start_time)

    @staticmethod
    def _resolve_unsupervised(rec: AppRecord) -> None:
        """Finishes an app whose supervisor is gone: stops its processes, records why."""
        groups = [
            (r.pid, r.start_time)
            for r in rec.replicas
            if r.pid is not None and not r.app_state.is_terminal()
        ]
        stop_groups(groups, min(rec.grace_period, DEAD_SUPERVISOR_GRACE_S))
        if rec.supervisor_pid is None:
            why = "the supervisor never started"
        else:
            why = f"supervisor pid {rec.supervisor_pid} died"
        for rep in rec.replicas:
            if not rep.app_state.is_terminal():
                rep.state = AppState.FAILED.name
                rep.msg = f"{why}; exit status of replica unknown"
                rep.exit_code = None
                rep.finished_at = time.time()
        if all(r.app_state == AppState.SUCCEEDED for r in rec.replicas):
            rec.state = AppState.SUCCEEDED.name
        else:
            rec.state = AppState.FAILED.name
            rec.msg = f"{why} (see {rec.supervisor_log}); the app's processes were stopped"
        rec.finished_at = time.time()

    # ---- logs --------------------------------------------------------------------------
    def supported_streams(self) -> frozenset[Stream]:
        """stdout, stderr and combined."""
        return frozenset(Stream)

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
        rec = self._store.load(app_id)
        if rec is None:
            raise ValueError(
                f"no local_cwd app {app_id!r} in {self._store.root} (see `tether list`)"
            )
        roles = rec.role_names()
        if role_name not in roles:
            close = difflib.get_close_matches(role_name, roles, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"app {app_id!r} has no role {role_name!r}{hint} (roles: {', '.join(roles)})"
            )
        rep = rec.replica(role_name, k)
        if rep is None:
            n = sum(1 for r in rec.replicas if r.role == role_name)
            raise ValueError(
                f"role {role_name!r} of app {app_id!r} has no replica {k}; valid replica ids: "
                f"0..{n - 1}"
            )
        finished: Callable[[], bool] | None = None
        if should_tail:

            def finished() -> bool:
                cur = self._load(app_id)
                if cur is None or cur.app_state.is_terminal():
                    return True
                r = cur.replica(role_name, k)
                return r is None or r.app_state == AppState.SUCCEEDED

        lines = read_log_lines(
            rep.log_path(streams.value),
            since=since.timestamp() if since is not None else None,
            until=until.timestamp() if until is not None else None,
            finished=finished,
        )
        if not regex:
            return lines
        try:
            pattern = re.compile(regex)
        except re.error as e:
            raise ValueError(f"invalid log filter regex {regex!r}: {e}") from None
        # what api.filter_regex does, with the per-line loop in C (logs may be gigabytes)
        return filter(pattern.search, lines)

    # ---- cancel ------------------------------------------------------------------------
    def cancel(self, app_id: str) -> None:
        """Cancels the app; a finished or unknown app is left alone (idempotent).

        Unlike ``describe``, does not first resolve an app whose supervisor died as FAILED:
        its processes are stopped and it is recorded CANCELLED, as asked.

        Args:
            app_id: The app.
        """
        rec = self._store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return
        self._cancel_existing(app_id)

    def _cancel_existing(self, app_id: str) -> None:
        """Stops every process of the app (children included) and records CANCELLED.

        Signals the supervisor, which stops the replicas' process groups (SIGTERM, SIGKILL
        after the grace period) and records the app CANCELLED. When the supervisor is dead
        or does not finish in time, stops the groups itself.
        """
        for _ in range(3):
            rec = self._store.load(app_id)
            if rec is None or rec.app_state.is_terminal():
                return
            if rec.supervisor_pid is not None and pid_alive(
                rec.supervisor_pid, rec.supervisor_start_time
            ):
                self._stop_supervisor(rec)
                continue
            with self._store.lock(app_id):
                rec = self._store.load(app_id)
                if rec is None or rec.app_state.is_terminal():
                    return
                if rec.supervisor_pid is not None and pid_alive(
                    rec.supervisor_pid, rec.supervisor_start_time
                ):
                    continue  # it just started: signal it
                groups = [
                    (r.pid, r.start_time)
                    for r in rec.replicas
                    if r.pid is not None and not r.app_state.is_terminal()
                ]
                stop_groups(groups, rec.grace_period)
                for rep in rec.replicas:
                    if not rep.app_state.is_terminal():
                        rep.state = AppState.CANCELLED.name
                        rep.msg = "cancelled"
                        rep.finished_at = time.time()
                rec.state = AppState.CANCELLED.name
                rec.msg = "cancelled"
                if rec.supervisor_pid is not None:
                    rec.msg += f" (its supervisor pid {rec.supervisor_pid} had died)"
                rec.finished_at = time.time()
                self._store.save(rec)
                return

    @staticmethod
    def _stop_supervisor(rec: AppRecord) -> None:
        pid, start = rec.supervisor_pid, rec.supervisor_start_time
        assert pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_pid_exit(pid, start, rec.grace_period + CANCEL_EXTRA_WAIT_S):
            return
        log.warning("supervisor pid %d of app %s did not stop; killing it", pid, rec.app_id)
        if pid_alive(pid, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_pid_exit(pid, start, 2.0)

    def _delete_existing(self, app_id: str) -> None:
        rec = self._store.load(app_id)
        if rec is not None:
            self._store.delete(rec)


# ---- helpers: waiting on processes -------------------------------------------------------


def _wait_readable(fd: int, timeout: float) -> bool:
    r, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return bool(r)


def _wait_pid_exit(pid: int, start_time: int | None, timeout: float) -> bool:
    """Blocks until process ``pid`` exits or ``timeout`` passes.

    Args:
        pid: The process (need not be a child).
        start_time: Its recorded start time (pid reuse guard).
        timeout: The most seconds to wait.

    Returns:
        True if the process is gone.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return True
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                if not pid_alive(pid, start_time):  # checked after opening: no reuse race
                    return True
                return _wait_readable(fd, deadline - time.monotonic())
            finally:
                os.close(fd)
    while pid_alive(pid, start_time):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.02, left))
    return True


# ---- helpers: reading logs ---------------------------------------------------------------


def read_log_lines(
    path: str,
    since: float | None = None,
    until: float | None = None,
    finished: Callable[[], bool] | None = None,
    poll_s: float = LOG_POLL_S,
) -> Iterator[str]:
    """The lines of a replica's log; each ends with ``\\n``, bad UTF-8 is replaced.

    Reads in large binary chunks and hands out lines in batches (the per-line iteration runs
    in C, so a gigabyte of log reads in seconds). With ``since``/``until`` the log's time
    index (written by the supervisor, 10 ms resolution) gives each line the time its first
    byte was received; the reader seeks close to ``since`` and stops at the first line at or
    after ``until``.

    Args:
        path: The log file.
        since: Only lines received at or after this time (seconds since the epoch).
        until: Only lines received before this time.
        finished: When given, follow the log until it returns True (then drain and stop).
        poll_s: How often to look for new data while following.

    Returns:
        An iterator of lines.
    """
    return itertools.chain.from_iterable(_line_batches(path, since, until, finished, poll_s))


def _line_batches(
    path: str,
    since: float | None,
    until: float | None,
    finished: Callable[[], bool] | None,
    poll_s: float,
) -> Iterator[list[str]]:
    f = _open_when_present(path, finished, poll_s)
    if f is None:
        return
    with f:
        if since is not None or until is not None:
            yield from _timed_batches(f, path + INDEX_SUFFIX, since, until, finished, poll_s)
        elif finished is not None:
            for _, data in _chunks(f, finished, poll_s):
                yield _decode_lines(data)
        else:
            yield from _text_batches(f)


def _open_when_present(
    path: str, finished: Callable[[], bool] | None, poll_s: float
) -> io.FileIO | None:
    while True:
        try:
            return open(path, "rb", buffering=0)
        except FileNotFoundError:
            if finished is None or finished():
                # a last look: the replica may have written just before it finished
                try:
                    return open(path, "rb", buffering=0)
                except FileNotFoundError:
                    return None
            time.sleep(poll_s)


def _text_batches(f: io.FileIO) -> Iterator[list[str]]:
    """The whole file as it is now, in batches of lines (the fast path, decoding in C)."""
    buffered = io.BufferedReader(f, buffer_size=1024 * 1024)
    text = io.TextIOWrapper(buffered, encoding="utf-8", errors="replace", newline="\n")
    while True:
        batch = text.readlines(LOG_READ_CHUNK)
        if not batch:
            return
        if not batch[-1].endswith("\n"):
            batch[-1] += "\n"
        yield batch


def _decode_lines(data: bytes) -> list[str]:
    """Complete lines (``data`` ends with ``\\n``) decoded, each keeping its ``\\n``."""
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
    return text.readlines()


def _chunks(
    f: io.FileIO, finished: Callable[[], bool] | None, poll_s: float
) -> Iterator[tuple[int, bytes]]:
    """``(offset, data)`` chunks of whole lines; a last partial line comes last, with
    ``\\n`` added. Follows the file until ``finished`` returns True, if it is given."""
    pos = f.tell()
    carry = b""
    done = False
    while True:
        data = f.read(LOG_READ_CHUNK)
        if data:
            if carry:
                data = carry + data
                carry = b""
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) >= MAX_LOG_LINE:
                    yield pos, data + b"\n"
                    pos += len(data)
                else:
                    carry = data
                continue
            if cut + 1 < len(data):
                carry = data[cut + 1 :]
                data = data[: cut + 1]
            yield pos, data
            pos += len(data)
            continue
        if finished is None or done:
            break
        if finished():
            done = True  # one more read drains what was written before the end
            continue
        time.sleep(poll_s)
    if carry:
        yield pos, carry + b"\n"


class _LineTimes:
    """The log's time index, reloaded as the log grows."""

    def __init__(self, idx_path: str) -> None:
        self.path = idx_path
        self.offsets: list[int] = []
        self.times: list[float] = []
        self._pos = 0
        self.reload()

    def reload(self) -> None:
        entries, self._pos = read_index(self.path, self._pos)
        for o, t in entries:
            self.offsets.append(o)
            self.times.append(t)

    def first_offset_at(self, when: float | None) -> float:
        """The offset from which on every byte was received at or after ``when``.

        Returns:
            The offset; infinity when no indexed byte is that recent (yet).
        """
        if when is None:
            return float("inf")
        i = bisect.bisect_left(self.times, when)
        return self.offsets[i] if i < len(self.offsets) else float("inf")


def _timed_batches(
    f: io.FileIO,
    idx_path: str,
    since: float | None,
    until: float | None,
    finished: Callable[[], bool] | None,
    poll_s: float,
) -> Iterator[list[str]]:
    """Lines received in ``[since, until)``: those that start at an offset in ``[S, U)``,
    where S and U are the offsets from which the index dates bytes at ``since``/``until``."""
    if not os.path.exists(idx_path):
        # written without a time index (not by a supervisor): nothing to date lines by
        log.warning("log %s has no time index; since/until are ignored", f.name)
        since = until = None
    times = _LineTimes(idx_path)
    skip_partial = False
    if since is not None:
        s0 = times.first_offset_at(since)
        start = int(s0) if s0 != float("inf") else (times.offsets[-1] if times.offsets else 0)
        if start > 0:
            f.seek(start - 1)
            skip_partial = f.read(1) != b"\n"  # that line began earlier: it is too old
        f.seek(start)

    def stop_following() -> bool:
        if until is not None and time.time() >= until:
            return True  # lines written from now on are too new
        return finished is not None and finished()

    follow = stop_following if finished is not None else None
    for pos, data in _chunks(f, follow, poll_s):
        times.reload()  # entries are written before their bytes: these cover ``data``
        lo = 0
        if skip_partial:
            lo = data.find(b"\n") + 1
            skip_partial = False
        if since is not None:
            s_off = times.first_offset_at(since) - pos
            if s_off >= len(data):
                continue  # every line of this chunk is older than since
            if s_off > lo:
                b = int(s_off)
                lo = b if data[b - 1 : b] == b"\n" else data.find(b"\n", b) + 1
                if lo == 0:
                    continue
        hi = len(data)
        u_off = times.first_offset_at(until) - pos
        if u_off <= 0:
            return
        if u_off < len(data):
            b = int(u_off)
            hi = data.find(b"\n", b - 1) + 1 or len(data)
        if hi > lo:
            yield _decode_lines(data[lo:hi])
        if u_off < len(data):
            return


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    """Creates the ``local_cwd`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``state_dir`` and ``gpu_count`` (see :class:`LocalScheduler`); other keys
            (options meant for other backends) are ignored.

    Returns:
        The scheduler.
    """
    known = {k: kwargs.pop(k) for k in ("state_dir", "gpu_count") if k in kwargs}
    if kwargs:
        log.debug("local_cwd ignores scheduler arguments %s", sorted(kwargs))
    return LocalScheduler(session_name, **known)
