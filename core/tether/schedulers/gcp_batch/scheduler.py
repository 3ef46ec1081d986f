"""The ``gcp_batch`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar

from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode
from tether.schedulers.gcp_batch.client import (
    GcpBatchClientError,
    make_client,
    read_log_lines,
    to_dict,
)
from tether.schedulers.gcp_batch.options import GcpBatchOpts
from tether.schedulers.gcp_batch.render import (
    BACKEND,
    JOB_ID_RULE,
    LABEL_APP,
    LABEL_JOB_KEY,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    GcpBatchRequest,
    app_id_of,
    check,
    format_request,
    job_name,
    label_value,
    render,
    resolve_project,
)
from tether.schedulers.gcp_batch.status import app_state, status_message
from tether.schedulers.ids import make_app_id
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    CfgVal,
    ReplicaStatus,
    RetryPolicy,
    Role,
    RoleStatus,
)


def _not_found(e: Exception) -> bool:
    return type(e).__name__ == "NotFound" or getattr(e, "code", None) == 404


def log_filter(project: str, job_uid: str, k: int) -> str:
    """The Cloud Logging filter of task ``k``'s output (Batch's ``batch_task_logs``).

    Args:
        project: The project.
        job_uid: The job's ``uid``.
        k: The task index.

    Returns:
        The filter.
    """
    return (
        f'logName="projects/{project}/logs/batch_task_logs" AND labels.job_uid="{job_uid}" '
        f'AND labels.task_id:"-group0-{k}/"'
    )


class GcpBatchScheduler(Scheduler[GcpBatchRequest, GcpBatchOpts]):
    """Runs apps as Google Cloud Batch jobs (see the package docs).

    Args:
        session_name: The runner's session.
        client: A ``batch_v1.BatchServiceClient`` (default: :func:`make_client` on first use).
        project: Project that ``list``/``find_jobs`` search (default: the environment's).
        location: Region that ``list``/``find_jobs`` search (default ``-``: all).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        durable=True,
        workspaces=frozenset(),
        streams=frozenset({Stream.COMBINED}),
        log_time_filter=False,
        log_tail=False,
        native_retries=frozenset({RetryPolicy.REPLICA}),
        gang=True,
        elastic=False,
        secrets=True,
        port_map=False,
        max_roles=1,
        # one ListJobs (by tether's label) per project and location per interval
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.gcp_batch.watch", interval=10.0),
    )

    def __init__(
        self,
        session_name: str,
        client: Any = None,
        project: str | None = None,
        location: str = "-",
    ) -> None:
        super().__init__(BACKEND, session_name)
        self._client = client
        self._project = project
        self._location = location

    def client(self) -> Any:
        """The Batch client (created on first use with the default credentials).

        Returns:
            The client.
        """
        if self._client is None:
            self._client = make_client()
        return self._client

    # ---- render and submit -------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: GcpBatchOpts) -> None:
        check(app, opts)
        resolve_project(opts)

    def _submit_dryrun(self, app: AppDef, opts: GcpBatchOpts) -> AppDryRunInfo[GcpBatchRequest]:
        req = render(app, opts, resolve_project(opts), make_app_id(app.name, JOB_ID_RULE))
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Creates the job (the job key, if any, is a label; re-attaching to a job of the
        same key is the Runner's ``run_or_attach``).

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id, ``project:location:job_id``.
        """
        req: GcpBatchRequest = dryrun_info.request
        self.client().create_job(request=req.request)
        return req.app_id

    # ---- query -------------------------------------------------------------------------
    def _get(self, app_id: str) -> dict[str, Any] | None:
        try:
            return to_dict(self.client().get_job(name=job_name(app_id)))
        except GcpBatchClientError:
            raise
        except Exception as e:
            if _not_found(e):
                return None
            raise

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the job (state, latest status event, task counts).

        Args:
            app_id: ``project:location:job_id``.

        Returns:
            The description, or None for an unknown job.
        """
        job = self._get(app_id)
        return None if job is None else self.describe_job(app_id, job)

    def describe_job(self, app_id: str, job: dict[str, Any]) -> DescribeAppResponse:
        """What :meth:`describe` answers for a job already read (also the watch hub's view).

        Args:
            app_id: ``project:location:job_id``.
            job: The job, as a dict (:func:`to_dict`).

        Returns:
            The description.
        """
        state = app_state(job)
        labels = job.get("labels", {}) or {}
        groups = job.get("task_groups", []) or []
        n = int(groups[0].get("task_count", 1)) if groups else 1
        role = str(labels.get(LABEL_ROLE, "role"))
        key = labels.get(LABEL_JOB_KEY)
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=-1,
            msg=status_message(job),
            roles=[Role(name=role, num_replicas=n)],
            roles_statuses=[RoleStatus(role, [ReplicaStatus(i, state, role) for i in range(n)])],
            job_key=None if key is None or str(key).startswith("h-") else str(key),
        )

    def jobs(self, project: str, location: str, extra: str = "") -> builtins.list[dict[str, Any]]:
        """tether's jobs of a project and location, from one (paged) ``ListJobs``.

        Args:
            project: The project.
            location: The location (``-``: all).
            extra: More of the filter, ANDed to tether's label.

        Returns:
            The jobs, as dicts.
        """
        flt = f'labels."{LABEL_MANAGED_BY}"="{MANAGED_BY}"'
        if extra:
            flt += f" AND {extra}"
        pager = self.client().list_jobs(
            request={"parent": f"projects/{project}/locations/{location}", "filter": flt}
        )
        jobs = [to_dict(msg) for msg in pager]
        return [j for j in jobs if (j.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY]

    def _list(self, project: str, location: str, extra: str = "") -> builtins.list[ListAppResponse]:
        out: builtins.list[ListAppResponse] = []
        for job in self.jobs(project, location, extra):
            labels = job.get("labels", {}) or {}
            key = labels.get(LABEL_JOB_KEY)
            out.append(ListAppResponse(
                app_id=app_id_of(str(job.get("name", ""))),
                state=app_state(job),
                name=str(labels.get(LABEL_APP, "")),
                job_key=None if key is None else str(key),
                created=_timestamp(job.get("create_time")),
            ))
        return sorted(out, key=lambda a: a.created or 0.0)

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The Batch jobs tether created in the project (label ``tether-managed-by``).

        Args:
            cfg: ``project`` and ``location`` may be given here.

        Returns:
            The apps, oldest first.
        """
        cfg = cfg or {}
        project = str(cfg.get("project") or self._project or resolve_project(GcpBatchOpts()))
        return self._list(project, str(cfg.get("location") or self._location))

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The jobs labelled with ``job_key`` (a label filter), oldest first.

        Args:
            job_key: The identity.
            cfg: Unused (where to look is the scheduler's own setting).

        Returns:
            Matching apps.
        """
        project = self._project or resolve_project(GcpBatchOpts())
        value = label_value(job_key)
        found = self._list(project, self._location, f'labels."{LABEL_JOB_KEY}"="{value}"')
        for a in found:
            a.job_key = job_key
        return found

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
        job = self._get(app_id)
        if job is None:
            raise ValueError(f"gcp_batch job {app_id!r} does not exist")
        project = app_id.split(":")[0]
        lines = read_log_lines(project, log_filter(project, str(job.get("uid", "")), k))
        return filter_regex(regex, (x if x.endswith("\n") else x + "\n" for x in lines))

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        try:
            self.client().cancel_job(name=job_name(app_id))
        except Exception as e:
            if not _not_found(e):
                raise

    def _delete_existing(self, app_id: str) -> None:
        try:
            self.client().delete_job(name=job_name(app_id))
        except Exception as e:
            if not _not_found(e):
                raise


def _timestamp(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def create_scheduler(session_name: str, **kwargs: Any) -> GcpBatchScheduler:
    """Creates the ``gcp_batch`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``client``, ``project``, ``location``.

    Returns:
        The scheduler.
    """
    return GcpBatchScheduler(session_name, **kwargs)
