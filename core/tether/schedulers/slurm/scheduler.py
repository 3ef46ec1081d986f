"""The ``slurm`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import codecs
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tether.errors import BackendError, BackendErrorKind
from tether.schedulers import interrupt
from tether.schedulers.api import (
    JOB_KEY,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode, MountKind
from tether.schedulers.errors import CapacityError
from tether.schedulers.slurm.client import SlurmCommandError
from tether.schedulers.slurm.connect import SlurmApi, make_client, request_text
from tether.schedulers.slurm.options import SlurmOpts
from tether.schedulers.slurm.outputs import for_cluster
from tether.schedulers.slurm.overlay import app_overlays
from tether.schedulers.slurm.render import (
    EXIT_FILE_PREFIX,
    RESTARTS_FILE,
    SlurmConfigError,
    SlurmRequest,
    check_app,
    check_opts,
    default_job_dir,
    render,
)
from tether.schedulers.slurm.rest_job import job_description
from tether.schedulers.slurm.status import (
    SlurmApp,
    from_squeue,
    role_statuses,
    roles,
    submit_refusal_limit,
)
from tether.schedulers.slurm.transport import (
    SETTING_FIELDS,
    ConnectionDropped,
    SlurmTransportConfigError,
    TransportSettings,
    settings_from,
)
from tether.schedulers.slurm.workspace import build_role_workspace
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    RetryPolicy,
    Role,
)
from tether.specs.status import is_terminal
from tether.workspace.api import WorkspaceMixin

log: logging.Logger = logging.getLogger(__name__)

BACKEND = "slurm"
LOG_POLL_S = 0.5
OOM_SCAN_BYTES = 8192
SEEN_MAX = 4096
"""Jobs whose file locations :meth:`SlurmScheduler.describe` keeps (see ``_remember``)."""
_OOM = re.compile(r"exceeded (job )?memory limit|oom[-_ ]kill|out of memory", re.IGNORECASE)


_NEEDS_JOB_DIR = (
    "transport={transport} needs the run option job_dir: a directory on the cluster that the "
    "nodes see (e.g. /home/USER/tether-jobs); the default is a path of this machine"
)


class SlurmSubmitError(BackendError, ValueError):
    """Slurm refused the job (sbatch failed); nothing was submitted. Carries Slurm's text."""

    backend: str = "slurm"
    kind: BackendErrorKind = "submit"


class SlurmCapacityError(SlurmSubmitError, CapacityError):
    """Slurm refused the job for a submit limit (a QOS's or association's ``MaxSubmitJobs``,
    the controller's ``MaxJobCount``): another backend may take it (failover)."""

    kind: BackendErrorKind = "quota"


class SlurmScheduler(Scheduler[SlurmRequest, SlurmOpts], WorkspaceMixin[None]):
    """Runs apps as Slurm batch jobs (see the package docs).

    Args:
        session_name: The runner's session.
        slurm_conf: The ``slurm.conf`` of the cluster (``SLURM_CONF``; default: Slurm's lookup).
        client: A client (:class:`~.client.SlurmClient`; tests pass one).
        jwt: ``transport=rest``: the token itself (a connection's secret; ``SLURM_JWT`` and
            ``jwt_file`` are the other sources).
        **transport: Transport settings (:class:`~.transport.TransportSettings`: ``transport``,
            ``host``, ``user``, ``port``, ``identity_file``, ``jump_host``, ``rest_url``...);
            the run options of the same names override them for a submission.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        needs_image=False,  # without a container runtime Role.image is not used
        durable=True,
        workspaces=frozenset({"dir"}),
        streams=frozenset(Stream),
        log_time_filter=False,
        log_tail=True,
        native_retries=frozenset({RetryPolicy.REPLICA, RetryPolicy.APPLICATION}),
        reconciled_retries=frozenset(),
        gang=True,
        elastic=False,
        mounts=frozenset({MountKind.BIND}),
        secrets=False,
        port_map=True,
        list_apps=True,
        job_identity=True,
        # one squeue (and one sacct for jobs that left the queue) per interval for all jobs
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.slurm.watch", interval=5.0),
    )

    def __init__(
        self,
        session_name: str,
        slurm_conf: str | None = None,
        client: SlurmApi | None = None,
        jwt: str | None = None,
        **transport: Any,
    ) -> None:
        super().__init__(BACKEND, session_name)
        self._settings = settings_from({**transport, "slurm_conf": slurm_conf})
        self._jwt = jwt
        self._client: SlurmApi = client or make_client(self._settings, jwt)
        self._seen: OrderedDict[str, tuple[str, str]] = OrderedDict()

    @property
    def client(self) -> SlurmApi:
        """The client of the transport in use (``run`` runs one Slurm command there)."""
        return self._client

    def _settings_for(self, cfg: Mapping[str, CfgVal]) -> TransportSettings:
        """The scheduler's transport settings with the run options' on top (checked)."""
        settings = self._settings.overlay({k: cfg.get(k) for k in SETTING_FIELDS if k in cfg})
        try:
            settings.check()
        except SlurmTransportConfigError as e:
            raise SlurmConfigError(str(e)) from None
        return settings

    def _use(self, settings: TransportSettings) -> SlurmApi:
        """Switches to the transport of ``settings`` (describe, logs... follow it)."""
        if settings != self._settings:
            self._client.close()
            self._settings = settings
            self._client = make_client(settings, self._jwt)
            self._seen.clear()
        return self._client

    def close(self) -> None:
        """Closes the transport's connection (the ssh master)."""
        self._client.close()

    # ---- options and render --------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: SlurmOpts) -> None:
        check_opts(opts, app)
        check_app(app, opts)
        app_overlays(app)
        settings = self._settings_for(opts)
        if settings.transport != "local" and not opts.job_dir:
            raise SlurmConfigError(_NEEDS_JOB_DIR.format(transport=settings.transport))

    def _submit_dryrun(self, app: AppDef, opts: SlurmOpts) -> AppDryRunInfo[SlurmRequest]:
        settings = self._settings_for(opts)
        kind = settings.transport
        req = render(for_cluster(app, settings), opts)
        if kind == "rest":
            job_description(req)  # refuses, now, a flag slurmrestd has no field for
        return AppDryRunInfo(req, lambda r: request_text(r, kind))

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Copies the role's workspace to ``workspace_dir`` (default ``<job_dir>/workspaces``);
        the role's tasks then run in the copy.

        Args:
            role: The role (its metadata records the copy).
            cfg: Resolved run options.
            build_cache: Shared between the roles of one submission.
        """
        opts = self.resolve_opts(cfg)
        settings = self._settings_for(opts)
        if settings.transport != "local" and not opts.job_dir:
            raise SlurmConfigError(_NEEDS_JOB_DIR.format(transport=settings.transport))
        base = opts.workspace_dir or os.path.join(opts.job_dir or default_job_dir(), "workspaces")
        copier = self._use(settings).workspace_copier()
        build_role_workspace(role, base, build_cache, copier)

    # ---- submit --------------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[SlurmRequest]) -> str:
        """Writes the script into the job directory and submits it with ``sbatch --parsable``.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The job id (the het leader's for several roles).

        Raises:
            SlurmSubmitError: When Slurm refuses the job, with its reason and the roles named.
        """
        req = dryrun_info.request
        client = self._use(self._settings_for(dryrun_info.cfg or {}))
        try:
            return client.submit(req)[0]
        except SlurmCommandError as e:
            raise self._refusal(dryrun_info, e) from None
        except ConnectionDropped as e:
            return self._after_drop(dryrun_info, e)

    def _after_drop(self, info: AppDryRunInfo[SlurmRequest], e: ConnectionDropped) -> str:
        """The connection broke during ``sbatch``: the job may or may not exist. With a job
        key, look for it over a new connection and submit again only when it is not there,
        so a job is never submitted twice."""
        key = info.app.metadata.get(JOB_KEY) if info.app is not None else None
        if not key:
            raise ConnectionDropped(
                e.transport,
                e.where,
                f"{e}; whether the job was submitted is unknown",
                "give the app a job key (the Runner does) so a resubmission is safe, or look "
                "with `squeue` before submitting again",
            ) from None
        found = self.find_jobs(key)
        if found:
            log.info("job %s with key %r was submitted before the connection dropped",
                     found[-1].app_id, key)  # fmt: skip
            return found[-1].app_id
        try:
            return self._client.submit(info.request)[0]
        except SlurmCommandError as err:
            raise self._refusal(info, err) from None

    def _refusal(self, info: AppDryRunInfo[SlurmRequest], e: SlurmCommandError) -> SlurmSubmitError:
        """The error for an ``sbatch`` refusal: a capacity refusal (a submit limit) is a
        :class:`SlurmCapacityError`."""
        text = e.stderr or str(e)
        limit = submit_refusal_limit(text)
        if limit is None:
            return SlurmSubmitError(self._explain(info, e))
        return SlurmCapacityError(f"{self._explain(info, e)} ({limit}; another scheduler "
                                  "may take the job)", quota=limit, detail=text.strip())

    @staticmethod
    def _explain(info: AppDryRunInfo[SlurmRequest], e: SlurmCommandError) -> str:
        req = info.request
        text = e.stderr or str(e)
        app = info.app  # set by submit_dryrun
        asks = ""
        if app is not None:
            asks = "; ".join(
                f"role {r.name!r}: {r.num_replicas} replica(s) of cpu={r.resource.cpu:g} "
                f"gpu={r.resource.gpu} memMB={r.resource.memMB}"
                for r in app.roles
            )
            gpu_roles = [r.name for r in app.roles if r.resource.gpu > 0]
            if gpu_roles and ("gres" in text.lower() or "node configuration" in text):
                asks += f" (GPUs asked for by {gpu_roles}: does the partition have GPUs?)"
        return f"slurm rejected job {req.job_name!r}: {text}" + (f" [{asks}]" if asks else "")

    # ---- query ---------------------------------------------------------------------------
    def _fetch(self, app_id: str) -> SlurmApp | None:
        app = self._lookup(app_id)
        return None if app is None or self._deleted(app) else app

    def _lookup(self, app_id: str) -> SlurmApp | None:
        """The job as Slurm knows it (``delete``'s marker not checked)."""
        if not app_id.isdigit():
            return None
        found = from_squeue(self._client.squeue(job_id=app_id))
        app = next((a for a in found if a.app_id == app_id), None)
        if app is None:
            app = next((a for a in self._client.accounting(job_id=app_id) if a.app_id == app_id),
                       None)  # fmt: skip
        return app

    @staticmethod
    def _tombstone(app: SlurmApp) -> Path | None:
        """``<job_dir>/.<job name>-<job id>.deleted``: ``delete`` writes it, since Slurm's own
        records of a job cannot be removed; tether no longer shows a job that has one."""
        return Path(app.job_dir) / f".{app.name}-{app.app_id}.deleted" if app.job_dir else None

    def _deleted(self, app: SlurmApp) -> bool:
        path = self._tombstone(app)
        return path is not None and self._client.files.exists(str(path))

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The job's state from ``squeue --json`` (``sacct`` once squeue forgot it).

        Args:
            app_id: The job id.

        Returns:
            The description, or None when Slurm does not know the job (or it is not tether's).
        """
        seen = self._seen.get(app_id)
        if seen is not None:  # squeue and the look at the files in one round trip
            jobs, sizes, deleted = self._client.squeue_probe(app_id, *seen)
            app = next((a for a in from_squeue(jobs) if a.app_id == app_id), None)
            if app is not None and seen == self._files_of(app):
                return None if deleted else self.describe_app(app, sizes)
        app = self._lookup(app_id)
        if app is None:
            return None
        sizes = {}
        if app.job_dir:  # delete's marker and the REPLICA restarts: one look at the files
            sizes, deleted = self._client.files.probe(*self._files_of(app))
            if deleted:
                return None
            self._remember(app)
        return self.describe_app(app, sizes)

    def _files_of(self, app: SlurmApp) -> tuple[str, str]:
        """(log directory, ``delete``'s marker) of a job."""
        return self._log_dir(app), str(self._tombstone(app))

    def _remember(self, app: SlurmApp) -> None:
        """Keeps where a job's files are (they never move), so the next :meth:`describe`
        reads the job and its files together; the oldest are forgotten past a bound."""
        self._seen[app.app_id] = self._files_of(app)
        self._seen.move_to_end(app.app_id)
        while len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)

    @staticmethod
    def _log_dir(app: SlurmApp) -> str:
        return f"{app.job_dir}/{app.name}-{app.app_id}"

    def describe_app(
        self, app: SlurmApp, log_sizes: Mapping[str, int] | None = None
    ) -> DescribeAppResponse:
        """What :meth:`describe` answers for a job already read (also the watch hub's view).

        Args:
            app: The job, from ``squeue`` or ``sacct``.
            log_sizes: The files of its log directory and their sizes, when already listed.

        Returns:
            The description.
        """
        app_id = app.app_id
        if log_sizes is None:
            log_sizes = self._client.files.sizes(self._log_dir(app)) if app.job_dir else {}
        restarts = sum(n for name, n in log_sizes.items() if name.startswith(RESTARTS_FILE))
        msg = app.msg
        if app.state == AppState.FAILED:
            msg += self._launch_note(app) + self._role_exit_note(app) + self._oom_note(app)
        return DescribeAppResponse(
            app_id=app_id,
            state=app.state,
            num_restarts=app.num_restarts + restarts,
            msg=msg,
            roles_statuses=role_statuses(app),
            roles=roles(app),
            job_key=app.marker.job_key,
        )

    def _launch_note(self, app: SlurmApp) -> str:
        """Why a job may have failed to start (Slurm's ``JobLaunchFailure``) where tether
        could not create its job directory (``rest`` without ``mount`` over it)."""
        if not any(c.reason == "JobLaunchFailure" for c in app.components):
            return ""
        if not app.job_dir or self._client.files.reaches(app.job_dir):
            return ""
        return (
            f"; Slurm could not start the job in job_dir {app.job_dir}: over transport "
            f"{self._settings.transport} tether cannot create it without mount=CLUSTER_DIR="
            "LOCAL_DIR over it; create it on the cluster (writable by the job's user) or "
            "give mount"
        )

    def _role_exit_note(self, app: SlurmApp) -> str:
        """``; exit codes by role: a=143 (stopped), b=5`` for a heterogeneous job."""
        if len(app.marker.roles) < 2 or not app.job_dir:
            return ""
        logs = Path(app.job_dir) / f"{app.name}-{app.app_id}"
        codes = []
        for (name, _), stem in zip(app.marker.roles, app.log_stems):
            data = self._client.files.read(str(logs / f"{EXIT_FILE_PREFIX}{stem}"))
            if data is None:
                continue
            rc = data.decode(errors="replace").strip()
            codes.append(f"{name}={rc}" + (" (stopped)" if rc == "143" else ""))
        return f"; exit codes by role: {', '.join(codes)}" if codes else ""

    def _oom_note(self, app: SlurmApp) -> str:
        """``; out of memory: <Slurm's line>`` when a log of the job says a step was killed
        for exceeding its memory (Slurm reports such a job as FAILED unless it enforces memory
        with cgroups, where the state is OUT_OF_MEMORY)."""
        if not app.job_dir:
            return ""
        files = self._client.files
        base = Path(app.job_dir)
        paths = [base / f"{app.name}-{app.app_id}.out"]
        logs = base / f"{app.name}-{app.app_id}"
        sizes = files.sizes(str(logs))
        paths += [logs / name for name in sorted(sizes)]
        for path in paths:
            size = sizes.get(path.name) if path.parent == logs else files.size(str(path))
            data = files.read(str(path), max(0, (size or 0) - OOM_SCAN_BYTES))
            if data is None:
                continue
            tail = data.decode("utf-8", errors="replace")
            for line in tail.splitlines():
                if _OOM.search(line):
                    return f"; out of memory ({path.name}): {line.strip()}"
        return ""

    @staticmethod
    def _listing(app: SlurmApp) -> ListAppResponse:
        return ListAppResponse(
            app_id=app.app_id,
            state=app.state,
            name=app.name,
            job_key=app.marker.job_key,
            created=app.created,
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """The current user's jobs that carry tether's marker, oldest first.

        Args:
            cfg: Run options: their transport settings (``transport``, ``host``,
                ``rest_url``...), when given, say which cluster to ask (the scheduler then
                stays on that transport, as after a submission with them).

        Returns:
            One entry per job.
        """
        client = self._use(self._settings_for(cfg or {}))
        user = client.login_user()
        apps = {a.app_id: a for a in from_squeue(client.squeue(user=user))}
        for a in client.accounting(user=user):
            apps.setdefault(a.app_id, a)
        return sorted(
            (self._listing(a) for a in apps.values() if not self._deleted(a)),
            key=lambda a: (a.created or 0.0, int(a.app_id) if a.app_id.isdigit() else 0),
        )

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The jobs submitted with job identity ``job_key`` (from their comments), oldest first.

        Args:
            job_key: The identity.
            cfg: The run options of the submission: a transport given only there (an
                orchestrator's retry re-attaching to a job it launched over ``ssh`` or
                ``rest``) is where the job is looked for (see :meth:`list`).

        Returns:
            Matching jobs.
        """
        return [a for a in self.list(cfg) if a.job_key == job_key]

    # ---- logs ----------------------------------------------------------------------------
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
        if not self._client.capabilities.reads_files:
            raise SlurmConfigError(
                f"the logs of job {app_id} are files in its job_dir on the cluster, which "
                f"transport {self._settings.transport} ({self._client.where}) cannot read; "
                "mount the cluster's shared filesystem here and give mount=CLUSTER_DIR="
                "LOCAL_DIR, read them on the cluster, or use transport=ssh"
            )
        app = self._fetch(app_id)
        if app is None:
            raise ValueError(f"slurm knows no tether job {app_id!r}")
        names = [n for n, _ in app.marker.roles]
        if role_name not in names:
            raise ValueError(f"job {app_id} has no role {role_name!r}; roles: {names}")
        idx = names.index(role_name)
        n = app.marker.roles[idx][1]
        if not 0 <= k < n:
            raise ValueError(f"role {role_name!r} of job {app_id} has replicas 0..{n - 1}, not {k}")
        if streams != Stream.COMBINED and not app.marker.split_streams:
            raise ValueError(
                f"job {app_id} keeps one combined log per replica; submit with the run option "
                f"split_streams=True to read the {streams.value} stream alone"
            )
        path = self.log_path(app, role_name, k, streams)
        return filter_regex(regex, self._lines(app_id, path, should_tail))

    @staticmethod
    def log_path(app: SlurmApp, role_name: str, k: int, stream: Stream = Stream.COMBINED) -> Path:
        """Where replica ``k`` of a role writes its output.

        Args:
            app: The job.
            role_name: The role.
            k: The replica.
            stream: Which stream.

        Returns:
            ``<job_dir>/<job name>-<job id>/<role>-<k>.out`` (``.stdout``, ``.stderr``).
        """
        idx = [n for n, _ in app.marker.roles].index(role_name)
        ext = {Stream.COMBINED: "out", Stream.STDOUT: "stdout", Stream.STDERR: "stderr"}[stream]
        return Path(app.job_dir) / f"{app.name}-{app.app_id}" / f"{app.log_stems[idx]}-{k}.{ext}"

    def _lines(self, app_id: str, path: Path, follow: bool) -> Iterator[str]:
        pos = 0
        pending = ""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            done = True
            if follow:
                app = self._fetch(app_id)
                done = app is None or is_terminal(app.state)
            data = self._client.files.read(str(path), pos)
            if data is not None:
                pos += len(data)
                text = pending + decoder.decode(data, final=False)
                lines = text.splitlines(keepends=True)
                pending = lines.pop() if lines and not lines[-1].endswith("\n") else ""
                yield from lines
            if done:
                if pending:
                    yield pending + "\n"
                return
            interrupt.pause(LOG_POLL_S)

    # ---- stop ----------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        self._client.scancel(app_id)

    def _delete_existing(self, app_id: str) -> None:
        app = self._fetch(app_id)
        tombstone = self._tombstone(app) if app is not None else None
        if app is None or tombstone is None:
            return
        files = self._client.files
        files.touch(str(tombstone))
        base = f"{app.job_dir}/{app.name}-{app.app_id}"
        files.remove(base, f"{base}.out", f"{base}.sbatch")


def create_scheduler(session_name: str, **kwargs: Any) -> SlurmScheduler:
    """Creates the ``slurm`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``slurm_conf``, ``client``, ``jwt`` and the transport settings (see
            :class:`SlurmScheduler`); other keys (options meant for other backends) are ignored.

    Returns:
        The scheduler.
    """
    names = ("slurm_conf", "client", "jwt", *SETTING_FIELDS)
    known = {k: kwargs.pop(k) for k in names if k in kwargs}
    if kwargs:
        log.debug("slurm ignores scheduler arguments %s", sorted(kwargs))
    return SlurmScheduler(session_name, **known)
