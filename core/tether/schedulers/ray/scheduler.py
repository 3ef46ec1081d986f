"""The ``ray`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
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
from tether.schedulers.ray import driver as driver_module
from tether.schedulers.ray.driver import failed_replica, split_replica_line
from tether.schedulers.ray.options import RayOpts
from tether.schedulers.ray.render import (
    BACKEND,
    DRIVER_MODULE,
    MANAGED_BY,
    META_APP_NAME,
    META_JOB_KEY,
    META_MANAGED_BY,
    META_ROLES,
    RayJobRequest,
    RayRenderError,
    check_opts,
    format_request,
    render,
    workspace_dir,
)
from tether.schedulers.ray.status import app_state, job_failure
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

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
ADDRESS_ENVS = ("TETHER_RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
LOG_POLL_S = 1.0
DELETE_WAIT_S = 60.0


class RayConnectionError(BackendError):
    """The Ray dashboard (Jobs API) cannot be reached or `ray` is not installed."""

    backend, kind = "ray", "connection"


def resolve_address(address: str | None = None) -> str:
    """The Jobs API address: the argument, else the first of ``$TETHER_RAY_ADDRESS``,
    ``$RAY_API_SERVER_ADDRESS``, an ``http(s)://`` ``$RAY_ADDRESS``, else
    ``http://127.0.0.1:8265``.

    Args:
        address: An explicit address.

    Returns:
        The address.
    """
    if address:
        return address
    for name in ADDRESS_ENVS:
        value = os.environ.get(name, "")
        if value and (name != "RAY_ADDRESS" or value.startswith(("http://", "https://"))):
            return value
    return DEFAULT_ADDRESS


def write_driver_package(parent: str) -> str:
    """Writes the driver as a package that ``py_modules`` ships (only stdlib + ray inside).

    Args:
        parent: Directory to create the package in.

    Returns:
        The package directory.
    """
    pkg = Path(parent) / DRIVER_MODULE
    pkg.mkdir()
    shutil.copyfile(str(driver_module.__file__), pkg / "driver.py")
    (pkg / "__init__.py").write_text('"""tether\'s Ray driver (shipped by tether)."""\n')
    (pkg / "__main__.py").write_text(
        "import sys\n\nfrom tether_ray_driver.driver import main\n\nsys.exit(main(sys.argv[1:]))\n"
    )
    return str(pkg)


def _roles_of(metadata: Mapping[str, str]) -> dict[str, int]:
    try:
        doc = json.loads(metadata.get(META_ROLES, "{}"))
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _replica(
    role: str, k: int, state: AppState, failed: tuple[str, int, int] | None
) -> ReplicaStatus:
    """A replica's status: the job's state; the replica that failed it has its exit code."""
    if failed is not None and failed[:2] == (role, k):
        return ReplicaStatus(k, AppState.FAILED, role, exit_code=failed[2])
    return ReplicaStatus(k, state, role)


class RayScheduler(Scheduler[RayJobRequest, RayOpts], WorkspaceMixin[None]):
    """Runs apps as Ray jobs through the Jobs API (see the package docs).

    Args:
        session_name: The runner's session.
        address: The Jobs API (dashboard) address; see :func:`resolve_address`.
        client: A ``JobSubmissionClient`` to use (default: one created on first use).
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
        elastic=True,
        secrets=False,
        port_map=False,
        # one jobs listing per interval for every followed job of the cluster
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.ray.watch", interval=5.0),
    )

    def __init__(self, session_name: str, address: str | None = None, client: Any = None) -> None:
        super().__init__(BACKEND, session_name)
        self.address = resolve_address(address)
        self._client = client
        self._lock = threading.Lock()

    # ---- plumbing ----------------------------------------------------------------------
    def client(self) -> Any:
        """The Jobs API client (created on first use).

        Returns:
            A ``ray.job_submission.JobSubmissionClient``.

        Raises:
            RayConnectionError: When ``ray`` is missing or the dashboard cannot be reached.
        """
        with self._lock:
            if self._client is None:
                try:
                    from ray.job_submission import JobSubmissionClient
                except ImportError as e:
                    raise RayConnectionError(
                        "the ray scheduler needs the ray package: pip install 'tether[ray]'"
                    ) from e
                try:
                    self._client = JobSubmissionClient(self.address)
                except (ConnectionError, OSError) as e:
                    raise RayConnectionError(
                        f"cannot reach the Ray dashboard (Jobs API) at {self.address}: "
                        f"{str(e).rstrip('.')}. "
                        "Start a cluster (ray start --head) or set $TETHER_RAY_ADDRESS / "
                        "$RAY_API_SERVER_ADDRESS (or scheduler_params ray.address) to its "
                        "http://host:port"
                    ) from e
            return self._client

    def _info(self, app_id: str) -> Any | None:
        try:
            return self.client().get_job_info(app_id)
        except RuntimeError as e:
            if "404" in str(e) or "does not exist" in str(e):
                return None
            raise

    # ---- render and submit -------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: RayOpts) -> None:
        check_opts(opts)
        wd = opts.working_dir or workspace_dir(app)
        if wd and not os.path.isdir(os.path.expanduser(wd)):
            raise RayRenderError(f"working_dir {wd!r} (the job's working_dir) is not a directory")
        for role in app.roles:
            if not role.entrypoint:
                raise RayRenderError(f"role {role.name!r}: entrypoint is empty")

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Nothing to build: the workspace directory is uploaded as the job's working_dir.

        Args:
            role: The role (checked, not changed).
            cfg: Resolved run options.
            build_cache: Unused.
        """
        workspace_dir(AppDef(name="check", roles=[role]))

    def _submit_dryrun(self, app: AppDef, opts: RayOpts) -> AppDryRunInfo[RayJobRequest]:
        req = render(app, opts, make_app_id(app.name), self.session_name)
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Submits the job (the job key, if any, is recorded in its metadata; re-attaching
        to a job of the same key is the Runner's ``run_or_attach``).

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id (the job's submission id).
        """
        req: RayJobRequest = dryrun_info.request
        client = self.client()
        with tempfile.TemporaryDirectory(prefix="tether-ray-") as tmp:
            client.submit_job(**req.submit_kwargs(write_driver_package(tmp)))
        return req.submission_id

    # ---- query -------------------------------------------------------------------------
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the job from the Jobs API (state, message, roles from the metadata).

        Args:
            app_id: The submission id.

        Returns:
            The description, or None for an unknown job.
        """
        info = self._info(app_id)
        if info is None:
            return None
        return self.describe_info(app_id, info)

    def describe_info(self, app_id: str, info: Any) -> DescribeAppResponse:
        """What :meth:`describe` answers for a job already read (also the watch hub's view).

        Args:
            app_id: The submission id.
            info: Its ``JobDetails`` (from ``get_job_info`` or ``list_jobs``).

        Returns:
            The description.
        """
        state = app_state(info.status)
        meta = dict(info.metadata or {})
        roles = _roles_of(meta)
        failed = failed_replica(info.message or "") if state == AppState.FAILED else None
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=0,
            msg=info.message or "",
            failure=job_failure(info.status, info.message or ""),
            ui_url=self.address,
            roles=[Role(name=n, num_replicas=c) for n, c in roles.items()],
            roles_statuses=[
                RoleStatus(n, [_replica(n, i, state, failed) for i in range(c)])
                for n, c in roles.items()
            ],
            job_key=meta.get(META_JOB_KEY),
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The Ray jobs tether submitted (by their metadata), oldest first.

        Args:
            cfg: Unused.

        Returns:
            The apps.
        """
        out: builtins.list[ListAppResponse] = []
        for job in self.client().list_jobs():
            meta = dict(job.metadata or {})
            if meta.get(META_MANAGED_BY) != MANAGED_BY or not job.submission_id:
                continue
            out.append(
                ListAppResponse(
                    app_id=job.submission_id,
                    state=app_state(job.status),
                    name=meta.get(META_APP_NAME, ""),
                    job_key=meta.get(META_JOB_KEY),
                    created=(job.start_time / 1000.0) if job.start_time else None,
                )
            )
        return sorted(out, key=lambda a: a.created or 0.0)

    # ---- logs --------------------------------------------------------------------------
    def _replica_lines(self, text: str, role_name: str, k: int) -> Iterator[str]:
        for line in text.splitlines():
            found = split_replica_line(line)
            if found is not None and found[0] == role_name and found[1] == k:
                yield found[2] + "\n"

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
        desc = self.describe(app_id)
        if desc is None:
            raise ValueError(f"ray job {app_id!r} does not exist")
        roles = {r.name: r.num_replicas for r in desc.roles}
        if role_name not in roles or not 0 <= k < roles[role_name]:
            raise ValueError(
                f"ray job {app_id!r} has no replica {role_name}/{k} (roles: "
                + ", ".join(f"{n} x{c}" for n, c in roles.items())
                + ")"
            )
        return filter_regex(regex, self._follow(app_id, role_name, k, should_tail))

    def _follow(self, app_id: str, role_name: str, k: int, should_tail: bool) -> Iterator[str]:
        seen = 0
        while True:
            # read the state before the log, so the last read covers everything
            finished = not should_tail or is_terminal(self._state(app_id))
            lines = list(self._replica_lines(self.client().get_job_logs(app_id), role_name, k))
            yield from lines[seen:]
            seen = max(seen, len(lines))
            if finished:
                return
            interrupt.pause(LOG_POLL_S)

    def _state(self, app_id: str) -> AppState:
        info = self._info(app_id)
        return AppState.UNKNOWN if info is None else app_state(info.status)

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        try:
            self.client().stop_job(app_id)
        except RuntimeError as e:
            if "404" not in str(e):
                raise

    def _delete_existing(self, app_id: str) -> None:
        # stop_job is asynchronous; Ray deletes only finished jobs
        deadline = time.monotonic() + DELETE_WAIT_S
        while not is_terminal(self._state(app_id)) and time.monotonic() < deadline:
            time.sleep(LOG_POLL_S)
        if is_terminal(self._state(app_id)):
            try:
                self.client().delete_job(app_id)
            except RuntimeError as e:
                if "404" not in str(e):
                    raise


def create_scheduler(session_name: str, **kwargs: Any) -> RayScheduler:
    """Creates the ``ray`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``address`` (the Jobs API), ``client``.

    Returns:
        The scheduler.
    """
    return RayScheduler(session_name, **kwargs)
