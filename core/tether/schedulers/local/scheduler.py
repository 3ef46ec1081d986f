"""The ``local_cwd`` scheduler class (see the package docs)."""

from __future__ import annotations

import atexit
import builtins
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tether.errors import SpecError
from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode
from tether.schedulers.gpus import host_gpu_count
from tether.schedulers.ids import make_app_id
from tether.schedulers.local.options import LocalOpts

# launch, procs and logs are imported by the methods that use them: a dryrun (and the CLI's
# start) needs none of them
from tether.schedulers.local.render import (
    BACKEND,
    LocalRequest,
    format_request,
    missing_needed_files,
    render,
    role_cwd,
)
from tether.schedulers.local.secretfiles import check_secrets, known_secret_values
from tether.schedulers.local.state import StateStore
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    RetryPolicy,
    Role,
)
from tether.specs.secrets import redact
from tether.workspace.api import WorkspaceMixin

if TYPE_CHECKING:
    from datetime import datetime

    from tether.schedulers.local.records import AppRecord
    from tether.specs.status import RoleStatus

log = logging.getLogger(__name__)


class LocalScheduler(Scheduler[LocalRequest, LocalOpts], WorkspaceMixin[None]):
    """Runs apps as local processes, durably (see the module docs).

    Args:
        session_name: The runner's session.
        state_dir: Tether's state directory (default ``$TETHER_STATE_DIR`` or
            ``~/.local/state/tether``).
        gpu_count: The host's GPU count, or a function returning it (default: asked of the
            NVIDIA driver); mostly for tests.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=True,
        needs_image=False,
        durable=True,
        workspaces=frozenset({"dir"}),
        streams=frozenset(Stream),
        log_time_filter=True,
        log_tail=True,
        # the supervisor is this backend's engine: it applies every policy itself
        native_retries=frozenset(RetryPolicy),
        mounts=frozenset(),
        secrets=True,  # read at launch from $TETHER_SECRETS_DIR/<name>/<key>
        # one stat() per followed app per scan; the scan's interval bounds how late a change is
        follow=Follow(FollowMode.STATE_SCAN, "tether.schedulers.local.watch", interval=0.2),
        ui_urls=False,  # no UI: describe gives no page of a job
    )

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
        self._tied: list[str] = []  # apps launched with exit_with_launcher=True

    @property
    def store(self) -> StateStore:
        """Where the app records live."""
        return self._store

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
    def _validate(self, app: AppDef, scheduler: str, opts: LocalOpts) -> None:
        if opts.cwd is not None and not os.path.isdir(os.path.expanduser(opts.cwd)):
            raise ValueError(f"run option cwd={opts.cwd!r} is not a directory")
        if opts.grace_period < 0:
            raise ValueError(f"run option grace_period must be >= 0, got {opts.grace_period}")
        default_cwd = os.path.expanduser(opts.cwd) if opts.cwd else os.getcwd()
        for role in app.roles:
            cwd = role_cwd(role, default_cwd)
            if not os.path.isdir(cwd):
                raise ValueError(f"role {role.name!r}: working directory {cwd!r} does not exist")
            self._check_entrypoint(role, cwd, bool(opts.prepend_cwd))
            check_secrets(role.name, role.secrets)
        from tether.schedulers.local.limits import fd_limit_problem

        problem = fd_limit_problem(sum(r.num_replicas for r in app.roles))
        if problem:
            raise ValueError(f"app {app.name!r}: {problem}")

    @staticmethod
    def _check_entrypoint(role: Role, cwd: str, prepend_cwd: bool = False) -> None:
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
        search = os.pathsep.join((cwd, search) if prepend_cwd else (search, cwd))
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

    def _submit_dryrun(self, app: AppDef, opts: LocalOpts) -> AppDryRunInfo[LocalRequest]:
        app_id = make_app_id(app.name)
        if opts.log_dir:
            log_dir = Path(opts.log_dir).expanduser().absolute() / app_id
        else:
            log_dir = self._store.apps_dir.absolute() / app_id / "logs"
        default_cwd = os.path.expanduser(opts.cwd) if opts.cwd else os.getcwd()
        missing = missing_needed_files(app, default_cwd)
        if missing:
            raise SpecError(f"app {app.name!r} cannot run: {'; '.join(missing)} (run from "
                            "the project's directory, or set the run option cwd=DIR)")
        req = render(app, opts, app_id, log_dir, default_cwd, self.device_count)
        return AppDryRunInfo(req, format_request)

    # ---- submit ------------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Starts the app's supervisor and returns once it claimed the app.

        The supervisor's claim (its pid and every replica's intent) is in the app's record
        by then (and on disk before any replica starts), so the app is never lost: it runs,
        or ``describe`` shows why not. The replicas start right after; until the record
        confirms them started, ``describe`` shows the app ``SUBMITTED`` and its replicas
        ``PENDING``, and a ``cancel`` keeps those not yet started from starting.

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
        app = dryrun_info.app
        if not isinstance(req, LocalRequest) or app is None:
            raise ValueError(
                "LocalScheduler.schedule() takes the AppDryRunInfo returned by "
                "submit_dryrun() of a local_cwd scheduler"
            )
        from tether.schedulers.local.launch import new_record

        app_dir = self._store.apps_dir / req.app_id
        opts = self.resolve_opts(dryrun_info.cfg)
        record = new_record(self._store, req, app, opts, self.session_name)
        try:
            self._store.create(record)
        except FileExistsError:
            raise ValueError(
                f"app {req.app_id!r} was already submitted; render a new request with "
                "submit_dryrun() to run the app again"
            ) from None
        log_dirs = list(dict.fromkeys(os.path.dirname(r.combined) for r in req.replicas()))
        self._start_supervisor(record, app_dir, log_dirs)
        if opts.exit_with_launcher:
            if not self._tied:
                atexit.register(self._cancel_tied)
            self._tied.append(req.app_id)
        return req.app_id

    def _cancel_tied(self) -> None:
        """Cancels the apps launched with ``exit_with_launcher`` (at close and at exit)."""
        tied, self._tied = self._tied, []
        for app_id in tied:
            try:
                self.cancel(app_id)
            except Exception:  # best effort at exit: one app must not block the others
                log.warning("could not cancel %s at launcher exit", app_id, exc_info=True)

    def close(self) -> None:
        """Cancels the apps launched here with ``exit_with_launcher=True``; others keep running."""
        self._cancel_tied()
        super().close()

    def _start_supervisor(self, record: AppRecord, app_dir: Path, log_dirs: list[str]) -> None:
        """Starts the app's supervisor and waits until it reports the app claimed (see
        :func:`~tether.schedulers.local.launch.start_supervisor`); when it does not, stops
        what it started, records the app FAILED and raises."""
        from tether.schedulers.local.launch import (
            SUPERVISOR_EXIT_WAIT_S,
            mark_failed,
            start_supervisor,
        )
        from tether.schedulers.local.procs import wait_pid_exit

        if start_supervisor(self._store, record, app_dir, log_dirs):
            return
        rec = self._store.load(record.app_id)
        if rec is None or rec.app_state.is_terminal():
            return  # e.g. cancelled by another process while starting
        if rec.supervisor_pid is not None:
            # a supervisor that died closed the launcher's socket before the process table
            # shows it dead: wait for that, so that its app is recorded FAILED, not CANCELLED
            if wait_pid_exit(rec.supervisor_pid, rec.supervisor_start_time,
                             SUPERVISOR_EXIT_WAIT_S):
                self.reconcile(record.app_id)  # it died: stop what it started, record why
            else:
                self._cancel_existing(record.app_id)  # too slow: stop it and what it started
        from tether.schedulers.local.failures import stderr_tail  # a rare path

        tail = stderr_tail(record.supervisor_log, lines=20)
        mark_failed(self._store, record.app_id, f"the supervisor did not start:\n{tail}")
        raise RuntimeError(
            f"the local_cwd supervisor of app {record.app_id!r} did not start the replicas "
            f"(see {record.supervisor_log}):\n{tail}"
        )

    # ---- describe ----------------------------------------------------------------------
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app from its durable record.

        Args:
            app_id: The app id.

        Returns:
            The description, or None when there is no such app.
        """
        return self.describe_loaded(app_id, self._store.load(app_id))

    def describe_loaded(self, app_id: str, loaded: AppRecord | None) -> DescribeAppResponse | None:
        """As :meth:`describe`, from the app's record just loaded by the caller (a reader that
        needs the record too reads it once, not twice).

        Args:
            app_id: The app id.
            loaded: What ``store.load(app_id)`` returned just now (left unchanged).

        Returns:
            The description, or None when there is no such app.
        """
        from tether.schedulers.local.records import app_from_json
        from tether.schedulers.local.status import replica_failure
        from tether.specs.status import ReplicaStatus, RoleStatus

        rec = self._settle(app_id, loaded)
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
                    failure=replica_failure(rep.app_state, rep.exit_code, rep.msg),
                )
            )
        return DescribeAppResponse(
            app_id=rec.app_id,
            state=rec.app_state,
            num_restarts=rec.num_restarts,
            msg=rec.msg,
            roles_statuses=list(roles.values()),
            roles=app_from_json(rec.app, check=False).roles,  # load() checked it
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

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The apps submitted with ``job_key``, oldest first (from the job index).

        Args:
            job_key: The job identity.
            cfg: Unused (where to look is the scheduler's own setting).

        Returns:
            The apps.
        """
        return [a for a in self._listing(self._store.job_app_ids(job_key)) if a.job_key == job_key]

    def _listing(self, app_ids: Iterable[str]) -> builtins.list[ListAppResponse]:
        out: builtins.list[ListAppResponse] = []
        for app_id in app_ids:
            try:
                rec = self._view(app_id)
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
        from tether.schedulers.local.procs import wait_pid_exit

        rec = self._store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return
        if rec.supervisor_pid is None:
            time.sleep(min(timeout, 0.05))
            return
        wait_pid_exit(rec.supervisor_pid, rec.supervisor_start_time, timeout)

    def _view(self, app_id: str) -> AppRecord | None:
        """The app's record as it stands, read only.

        An unfinished app whose supervisor is gone is shown as it will be recorded (FAILED,
        with the reason) without writing anything or touching a process: that is
        :meth:`reconcile`'s.
        """
        return self._settle(app_id, self._store.load(app_id))

    def _settle(self, app_id: str, rec: AppRecord | None) -> AppRecord | None:
        """:meth:`_view` from a record just loaded (a record it marks is one it read again,
        never ``rec``)."""
        from tether.schedulers.local.procs import mark_unsupervised, supervised

        if rec is None or rec.app_state.is_terminal() or supervised(rec):
            return rec
        # read again now that the supervisor is known to be gone: it may have recorded the
        # app's end between the read above and the check (its last write is its last word)
        rec = self._store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return rec
        mark_unsupervised(rec)
        return rec

    def reconcile(self, app_id: str) -> None:
        """Finishes an app whose supervisor died: stops every process it may have left
        (recorded process groups, then any process carrying the app's id) and records why.

        Idempotent and safe from several processes at once (under the app's lock); an app
        whose supervisor lives is left alone (the supervisor applies retries itself).

        Args:
            app_id: The app.
        """
        from tether.schedulers.local.procs import recover

        recover(self._store, app_id)

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
        from tether.schedulers.local.logs import read_log_lines

        rec = self._store.load(app_id)
        if rec is None:
            raise ValueError(
                f"no local_cwd app {app_id!r} in {self._store.root} (see `tether list`)"
            )
        roles = rec.role_names()
        if role_name not in roles:
            import difflib

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
                cur = self._view(app_id)
                if cur is None or cur.app_state.is_terminal():
                    return True
                r = cur.replica(role_name, k)
                return r is None or r.app_state == AppState.SUCCEEDED

        lines = read_log_lines(
            rep.log_path(streams.value),
            since=since.timestamp() if since is not None else None,
            until=until.timestamp() if until is not None else None,
            finished=finished,
            # between looks, wake as soon as the app ends (its supervisor exits)
            wait=(lambda t: self.wait_for_change(app_id, t)) if should_tail else None,
        )
        from tether.schedulers.local.records import app_from_json

        roles_of = app_from_json(rec.app, check=False).roles  # load() checked it
        role = next((r for r in roles_of if r.name == role_name), None)
        if role is not None and role.secrets:
            # values of the role's SecretRefs (readable here: this user's secrets dir)
            known = [v for v in known_secret_values(role.secrets) if v]
            if known:
                lines = (redact(line, known) for line in lines)
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
        """Stops every process of the app (children included) and records CANCELLED (see
        :func:`~tether.schedulers.local.procs.cancel_app`)."""
        from tether.schedulers.local.procs import cancel_app

        cancel_app(self._store, app_id)

    def _delete_existing(self, app_id: str) -> None:
        rec = self._store.load(app_id)
        if rec is not None:
            self._store.delete(rec)


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

