"""The ``aws_batch`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
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
from tether.schedulers.aws_batch.options import AwsBatchOpts
from tether.schedulers.aws_batch.render import (
    BACKEND,
    JOB_NAME_RULE,
    MANAGED_BY,
    MAX_NODE_GROUPS,
    TAG_APP,
    TAG_DELETED,
    TAG_JOB_KEY,
    TAG_MANAGED_BY,
    TAG_ROLES,
    AwsBatchRenderError,
    AwsBatchRequest,
    check,
    format_request,
    parse_app_id,
    queue_name,
    render,
    tag_value,
)
from tether.schedulers.aws_batch.status import (
    CANCEL_REASON,
    app_state,
    exit_code,
    job_failure,
    status_message,
)
from tether.schedulers.aws_client import (
    AwsClientError,
    call,
    error_code,
    make_client,
    resolve_region,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode, MountKind
from tether.schedulers.ids import make_app_id
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    ReplicaStatus,
    RetryPolicy,
    Role,
    RoleStatus,
)
from tether.specs.status import is_terminal

DESCRIBE_BATCH = 100
"""``describe_jobs`` takes at most 100 ids."""
TAIL_POLL_S = 1.0
LOG_GROUP = "/aws/batch/job"


class AwsBatchSubmitError(BackendError):
    """Batch refused the job (the AWS error text is in the message)."""

    backend, kind = "aws_batch", "submit"


def parse_roles(tag: str) -> list[tuple[str, int]]:
    """The ``tether-roles`` tag (``trainer:2 ps:1``) as ``[(role, replicas)]``.

    Args:
        tag: The tag value.

    Returns:
        The roles in node order.
    """
    out: list[tuple[str, int]] = []
    for item in tag.split():
        name, _, n = item.rpartition(":")
        out.append((name, int(n) if n.isdigit() else 1))
    return out


class AwsBatchScheduler(Scheduler[AwsBatchRequest, AwsBatchOpts]):
    """Runs apps as AWS Batch jobs (see the package docs).

    Args:
        session_name: The runner's session.
        region: Default region of ``list``/``find_jobs`` (default: the environment's).
        profile: Named AWS profile (default: boto3's chain, ``$AWS_PROFILE``).
        queue: Job queue that ``list``/``find_jobs`` search (default: every queue).
        endpoint_url: Another endpoint for every AWS service (default: boto3's, which
            honours ``$AWS_ENDPOINT_URL``).
        log_group: CloudWatch Logs group of the jobs' output (Batch's default).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        durable=True,
        workspaces=frozenset(),
        streams=frozenset({Stream.COMBINED}),
        log_time_filter=True,
        log_tail=True,
        native_retries=frozenset({RetryPolicy.APPLICATION}),
        gang=True,
        elastic=False,
        mounts=frozenset({MountKind.BIND, MountKind.VOLUME, MountKind.DEVICE}),
        secrets=True,
        port_map=False,
        list_apps=True,
        job_identity=True,
        max_roles=MAX_NODE_GROUPS,
        # DescribeJobs with up to 100 ids a call for every followed job of a queue
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.aws_batch.watch", interval=10.0),
    )

    def __init__(self, session_name: str, region: str | None = None, profile: str | None = None,
                 queue: str | None = None, endpoint_url: str | None = None,
                 log_group: str = LOG_GROUP) -> None:
        super().__init__(BACKEND, session_name)
        self._region = region
        self._profile = profile
        self._queue = queue
        self._endpoint_url = endpoint_url
        self._log_group = log_group
        self._clients: dict[tuple[str, str], Any] = {}
        self._job_ids: dict[str, str] = {}
        self._regions_seen: set[str] = set()

    def client(self, service: str, region: str) -> Any:
        """A boto3 client of ``service`` in ``region`` (created on first use).

        Args:
            service: ``batch`` or ``logs``.
            region: The region.

        Returns:
            The client.
        """
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = make_client(service, region, self._profile, self._endpoint_url)
        return self._clients[key]

    # ---- render and submit -------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: AwsBatchOpts) -> None:
        check(app, opts)

    def _submit_dryrun(self, app: AppDef, opts: AwsBatchOpts) -> AppDryRunInfo[AwsBatchRequest]:
        region = resolve_region(opts.region or self._region, opts.profile or self._profile)
        req = render(app, opts, region, make_app_id(app.name, JOB_NAME_RULE))
        if opts.profile and not self._profile:
            self._profile = opts.profile
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Registers the job definition (or reuses one of equal content) and submits the job.

        When the submission fails, a job definition registered for it is deregistered again,
        so a bad queue leaves nothing behind.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id, ``region:queue:job_name``.

        Raises:
            AwsBatchSubmitError: With the AWS error text when Batch refuses the job.
        """
        req: AwsBatchRequest = dryrun_info.request
        batch = self.client("batch", req.region)
        name = req.job_definition["jobDefinitionName"]
        found = call(batch.describe_job_definitions, jobDefinitionName=name,
                     status="ACTIVE")["jobDefinitions"]  # fmt: skip
        if found:
            arn = max(found, key=lambda d: int(d.get("revision", 0)))["jobDefinitionArn"]
            registered = False
        else:
            arn = call(batch.register_job_definition, **req.job_definition)["jobDefinitionArn"]
            registered = True
        try:
            out = call(batch.submit_job, **{**req.submit, "jobDefinition": arn})
        except AwsClientError:
            raise
        except Exception as e:
            if registered:
                call(batch.deregister_job_definition, jobDefinition=arn)
            raise AwsBatchSubmitError(
                f"AWS Batch refused job {req.submit['jobName']!r} on queue "
                f"{req.submit['jobQueue']!r}: {e}"
            ) from e
        self._job_ids[req.app_id] = out["jobId"]
        self._regions_seen.add(req.region)
        return req.app_id

    # ---- query -------------------------------------------------------------------------
    def _job_id(self, app_id: str) -> str | None:
        if app_id in self._job_ids:
            return self._job_ids[app_id]
        region, queue, name = parse_app_id(app_id)
        try:
            found = self._list_summaries(region, queue, [{"name": "JOB_NAME", "values": [name]}])
        except AwsClientError:
            raise
        except Exception as e:
            if error_code(e) == "ClientException":  # the queue does not exist (any more)
                return None
            raise
        found = [j for j in found if j.get("jobName") == name]
        if not found:
            return None
        job_id = str(max(found, key=lambda j: j.get("createdAt", 0))["jobId"])
        self._job_ids[app_id] = job_id
        return job_id

    def _describe_ids(self, region: str, ids: list[str]) -> list[dict[str, Any]]:
        batch = self.client("batch", region)
        out: list[dict[str, Any]] = []
        for i in range(0, len(ids), DESCRIBE_BATCH):
            out += call(batch.describe_jobs, jobs=ids[i:i + DESCRIBE_BATCH])["jobs"]
        return out

    def _job(self, app_id: str) -> dict[str, Any] | None:
        """The job as ``describe_jobs`` returns it; None when unknown or deleted by tether."""
        try:
            region = parse_app_id(app_id)[0]
        except AwsBatchRenderError:
            return None
        job_id = self._job_id(app_id)
        if job_id is None:
            return None
        jobs = self._describe_ids(region, [job_id])
        if not jobs or (jobs[0].get("tags") or {}).get(TAG_DELETED):
            return None
        return jobs[0]

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the job: state, ``statusReason``, exit code, attempts.

        Args:
            app_id: ``region:queue:job_name``.

        Returns:
            The description, or None for an unknown (or deleted) job.
        """
        job = self._job(app_id)
        if job is None:
            return None
        return self.describe_job(app_id, job)

    def describe_job(self, app_id: str, job: dict[str, Any]) -> DescribeAppResponse:
        """What :meth:`describe` answers for a job already read (also the watch hub's view).

        Args:
            app_id: ``region:queue:job_name``.
            job: The job as ``describe_jobs`` returned it.

        Returns:
            The description.
        """
        state = app_state(job)
        tags = job.get("tags") or {}
        roles = parse_roles(str(tags.get(TAG_ROLES, ""))) or [("main", 1)]
        code = exit_code(job) if state in (AppState.FAILED, AppState.SUCCEEDED) else None
        if code is None and state == AppState.FAILED:
            # the job summary carries the exit code where the full description has none (moto)
            job = {**job, "container": {**(job.get("container") or {}),
                                        "exitCode": self._summary_exit_code(app_id)}}
            code = exit_code(job)
        msg = status_message(job)
        failure = job_failure(job)
        if state == AppState.FAILED and sum(n for _, n in roles) == 1 and msg:
            msg = f"{roles[0][0]}/0: {msg}"
        statuses = [
            RoleStatus(name, [ReplicaStatus(k, state, name, exit_code=code,
                                            msg=msg if state == AppState.FAILED else "",
                                            failure=failure)
                              for k in range(n)])
            for name, n in roles
        ]  # fmt: skip
        key = tags.get(TAG_JOB_KEY)
        region = parse_app_id(app_id)[0]
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max(0, len(job.get("attempts") or []) - 1),
            msg=msg,
            roles=[Role(name=name, num_replicas=n) for name, n in roles],
            roles_statuses=statuses,
            failure=failure,
            ui_url=(f"https://{region}.console.aws.amazon.com/batch/home?region={region}"
                    f"#jobs/detail/{job['jobId']}"),
            metadata={"job_id": str(job["jobId"]), "job_arn": str(job.get("jobArn", ""))},
            job_key=None if key is None or str(key).startswith("h-") else str(key),
        )

    def _summary_exit_code(self, app_id: str) -> int | None:
        region, queue, name = parse_app_id(app_id)
        found = self._list_summaries(region, queue, [{"name": "JOB_NAME", "values": [name]}])
        for j in found:
            if j.get("jobId") == self._job_ids.get(app_id):
                code = (j.get("container") or {}).get("exitCode")
                return None if code is None else int(code)
        return None

    def _list_summaries(self, region: str, queue: str,
                        filters: builtins.list[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
        batch = self.client("batch", region)
        out: builtins.list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"jobQueue": queue, "filters": filters}
            if token:
                kw["nextToken"] = token
            page = call(batch.list_jobs, **kw)
            out += page.get("jobSummaryList", [])
            token = page.get("nextToken")
            if not token:
                return out

    def _queues(self, region: str, queue: str | None) -> builtins.list[str]:
        if queue:
            return [queue]
        batch = self.client("batch", region)
        names: builtins.list[str] = []
        token: str | None = None
        while True:
            page = call(batch.describe_job_queues, **({"nextToken": token} if token else {}))
            names += [str(q["jobQueueName"]) for q in page.get("jobQueues", [])]
            token = page.get("nextToken")
            if not token:
                return names

    def _managed(self, region: str, queue: str | None,
                 job_key: str | None = None) -> builtins.list[ListAppResponse]:
        out: builtins.list[ListAppResponse] = []
        for q in self._queues(region, queue):
            # any filter makes list_jobs return every status (not only RUNNING)
            ids = [str(j["jobId"]) for j in self._list_summaries(
                region, q, [{"name": "AFTER_CREATED_AT", "values": ["0"]}])]
            for job in self._describe_ids(region, ids):
                tags = job.get("tags") or {}
                if tags.get(TAG_MANAGED_BY) != MANAGED_BY or tags.get(TAG_DELETED):
                    continue
                if job_key is not None and tags.get(TAG_JOB_KEY) != tag_value(job_key):
                    continue
                key = tags.get(TAG_JOB_KEY)
                out.append(ListAppResponse(
                    app_id=f"{region}:{queue_name(q)}:{job['jobName']}",
                    state=app_state(job),
                    name=str(tags.get(TAG_APP, "")),
                    job_key=job_key if job_key is not None else (
                        None if key is None or str(key).startswith("h-") else str(key)),
                    created=float(job.get("createdAt", 0)) / 1000.0,
                ))
        return sorted(out, key=lambda a: a.created or 0.0)

    def _default_region(self) -> str:
        return self._region or resolve_region(None, self._profile)

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The Batch jobs tether submitted (tag ``tether-managed-by``) in a region.

        Args:
            cfg: ``region`` and ``queue`` may be given here (default: every queue).

        Returns:
            The apps, oldest first.
        """
        cfg = cfg or {}
        region = str(cfg.get("region") or self._default_region())
        return self._managed(region, str(cfg.get("queue") or self._queue or "") or None)

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The jobs tagged with ``job_key`` in the known regions, oldest first.

        Args:
            job_key: The identity.
            cfg: Unused (where to look is the scheduler's own setting).

        Returns:
            Matching apps.
        """
        regions = sorted({self._default_region(), *self._regions_seen})
        found = [a for r in regions for a in self._managed(r, self._queue, job_key)]
        return sorted(found, key=lambda a: a.created or 0.0)

    # ---- logs --------------------------------------------------------------------------
    def _stream_name(self, app_id: str, job: dict[str, Any], role_name: str, k: int) -> str:
        roles = parse_roles(str((job.get("tags") or {}).get(TAG_ROLES, "")))
        node = 0
        for name, n in roles:
            if name == role_name:
                if not 0 <= k < n:
                    raise ValueError(f"role {role_name!r} of {app_id} has replicas 0..{n - 1}")
                node += k
                break
            node += n
        else:
            raise ValueError(f"app {app_id} has no role {role_name!r} "
                             f"(roles: {', '.join(r for r, _ in roles)})")  # fmt: skip

        def latest(j: dict[str, Any]) -> str:
            attempts = j.get("attempts") or []
            for src in [*(a.get("container", {}) for a in reversed(attempts)),
                        j.get("container") or {}]:  # fmt: skip
                if src.get("logStreamName"):
                    return str(src["logStreamName"])
            return ""

        if job.get("nodeProperties"):
            region = parse_app_id(app_id)[0]
            nodes = self._describe_ids(region, [f"{job['jobId']}#{node}"])
            if nodes and latest(nodes[0]):
                return latest(nodes[0])
            # no node jobs (moto): the job's one stream holds every node's output
        return latest(job)

    def _events(self, app_id: str, stream: str, start: int | None, end: int | None,
                token: str | None) -> tuple[builtins.list[str], str | None]:
        region = parse_app_id(app_id)[0]
        logs = self.client("logs", region)
        kw: dict[str, Any] = {"logGroupName": self._log_group, "logStreamName": stream,
                              "startFromHead": True}  # fmt: skip
        if start is not None:
            kw["startTime"] = start
        if end is not None:
            kw["endTime"] = end
        lines: builtins.list[str] = []
        while True:
            if token:
                kw["nextToken"] = token
            try:
                page = call(logs.get_log_events, **kw)
            except AwsClientError:
                raise
            except Exception as e:
                if error_code(e) == "ResourceNotFoundException":
                    return lines, token
                raise
            lines += [str(ev.get("message", "")) for ev in page.get("events", [])]
            nxt = page.get("nextForwardToken")
            if not page.get("events") or nxt == token:
                return lines, nxt
            token = nxt

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
        job = self._job(app_id)
        if job is None:
            raise ValueError(f"aws_batch job {app_id!r} does not exist")
        self._stream_name(app_id, job, role_name, k)  # checks role and replica now
        start = int(since.timestamp() * 1000) if since else None
        end = int(until.timestamp() * 1000) if until else None
        return filter_regex(
            regex, self._follow(app_id, job, role_name, k, start, end, should_tail))

    def _follow(self, app_id: str, job: dict[str, Any] | None, role_name: str, k: int,
                start: int | None, end: int | None, should_tail: bool) -> Iterator[str]:
        token: str | None = None
        stream = ""
        first = True
        while True:
            if not first:
                job = self._job(app_id)
            first = False
            done = job is None or is_terminal(app_state(job))
            if job is not None and not stream:
                stream = self._stream_name(app_id, job, role_name, k)
            lines: builtins.list[str] = []
            if stream:
                lines, token = self._events(app_id, stream, start, end, token)
            yield from (x if x.endswith("\n") else x + "\n" for x in lines)
            if not should_tail or (done and not lines):
                return
            if not lines:
                interrupt.pause(TAIL_POLL_S)

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        job_id = self._job_id(app_id)
        if job_id is None:
            return
        batch = self.client("batch", parse_app_id(app_id)[0])
        try:
            call(batch.terminate_job, jobId=job_id, reason=CANCEL_REASON)
        except AwsClientError:
            raise
        except Exception as e:
            if error_code(e) != "ClientException":
                raise

    def _delete_existing(self, app_id: str) -> None:
        # Batch cannot delete jobs (it forgets them days after they end): tag the job as
        # deleted so tether no longer lists or describes it, and deregister a job definition
        # made for this job alone (multi-node jobs carry their environment in it)
        job = self._job(app_id)
        if job is None:
            return
        batch = self.client("batch", parse_app_id(app_id)[0])
        call(batch.tag_resource, resourceArn=job["jobArn"], tags={TAG_DELETED: "true"})
        if job.get("nodeProperties"):
            call(batch.deregister_job_definition, jobDefinition=job["jobDefinition"])


def create_scheduler(session_name: str, **kwargs: Any) -> AwsBatchScheduler:
    """Creates the ``aws_batch`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``region``, ``profile``, ``queue``, ``endpoint_url``, ``log_group``.

    Returns:
        The scheduler.
    """
    return AwsBatchScheduler(session_name, **kwargs)
