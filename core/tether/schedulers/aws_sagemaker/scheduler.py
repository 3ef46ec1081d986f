"""The ``aws_sagemaker`` scheduler class (see the package docs)."""

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
from tether.schedulers.aws_client import (
    AwsClientError,
    call,
    error_code,
    make_client,
    resolve_region,
)
from tether.schedulers.aws_sagemaker.options import AwsSageMakerOpts
from tether.schedulers.aws_sagemaker.render import (
    BACKEND,
    JOB_NAME_RULE,
    MANAGED_BY,
    TAG_APP,
    TAG_JOB_KEY,
    TAG_MANAGED_BY,
    TAG_ROLE,
    AwsSageMakerRenderError,
    AwsSageMakerRequest,
    check,
    format_request,
    parse_app_id,
    render,
)
from tether.schedulers.aws_sagemaker.status import app_state, job_failure, status_message
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode
from tether.schedulers.ids import make_app_id
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    CfgVal,
    ReplicaStatus,
    Role,
    RoleStatus,
)
from tether.specs.status import is_terminal

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TAIL_POLL_S = 2.0


class AwsSageMakerSubmitError(BackendError):
    """SageMaker refused the training job (the AWS error text is in the message)."""

    backend, kind = "aws_sagemaker", "submit"


class AwsSageMakerScheduler(Scheduler[AwsSageMakerRequest, AwsSageMakerOpts]):
    """Runs one-role apps as SageMaker training jobs (see the package docs).

    Args:
        session_name: The runner's session.
        region: Default region of ``list`` (default: the environment's).
        profile: Named AWS profile (default: boto3's chain).
        endpoint_url: Another endpoint (default: boto3's; ``$AWS_ENDPOINT_URL`` works).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        durable=True,
        streams=frozenset({Stream.COMBINED}),
        log_time_filter=True,
        log_tail=True,
        gang=True,
        secrets=False,
        port_map=False,
        list_apps=True,
        job_identity=True,
        max_roles=1,
        # ListTrainingJobs per region per interval; a job described only when it changed
        follow=Follow(
            FollowMode.BATCH_POLL, "tether.schedulers.aws_sagemaker.watch", interval=10.0
        ),
    )

    def __init__(self, session_name: str, region: str | None = None, profile: str | None = None,
                 endpoint_url: str | None = None) -> None:
        super().__init__(BACKEND, session_name)
        self._region = region
        self._profile = profile
        self._endpoint_url = endpoint_url
        self._clients: dict[tuple[str, str], Any] = {}

    def client(self, service: str, region: str) -> Any:
        """A boto3 client of ``service`` in ``region`` (created on first use).

        Args:
            service: ``sagemaker`` or ``logs``.
            region: The region.

        Returns:
            The client.
        """
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = make_client(service, region, self._profile, self._endpoint_url)
        return self._clients[key]

    # ---- render and submit -------------------------------------------------------------
    def _validate(self, app: AppDef, scheduler: str, opts: AwsSageMakerOpts) -> None:
        check(app, opts)

    def _submit_dryrun(
        self, app: AppDef, opts: AwsSageMakerOpts
    ) -> AppDryRunInfo[AwsSageMakerRequest]:
        region = resolve_region(opts.region or self._region, opts.profile or self._profile)
        req = render(app, opts, region, make_app_id(app.name, JOB_NAME_RULE))
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Creates the training job.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id, ``region:training_job_name``.

        Raises:
            AwsSageMakerSubmitError: With the AWS error text when SageMaker refuses it.
        """
        req: AwsSageMakerRequest = dryrun_info.request
        try:
            call(self.client("sagemaker", req.region).create_training_job, **req.request)
        except AwsClientError:
            raise
        except Exception as e:
            raise AwsSageMakerSubmitError(
                f"SageMaker refused training job {req.request['TrainingJobName']!r}: {e}"
            ) from e
        return req.app_id

    # ---- query -------------------------------------------------------------------------
    def training_job(self, app_id: str) -> dict[str, Any] | None:
        """``DescribeTrainingJob`` of one job.

        Args:
            app_id: ``region:training_job_name``.

        Returns:
            The description; None for an unknown job.
        """
        return self._job(app_id)

    def summaries(
        self, region: str, created_after: datetime | None
    ) -> builtins.list[dict[str, Any]]:
        """Every training job of the region created after a time, from paged
        ``ListTrainingJobs`` calls (100 a page): name, status, creation and change times.

        Args:
            region: The region.
            created_after: Only jobs created after it (None: all).

        Returns:
            The summaries.
        """
        sm = self.client("sagemaker", region)
        query: dict[str, Any] = {"MaxResults": 100}
        if created_after is not None:
            query["CreationTimeAfter"] = created_after
        out: builtins.list[dict[str, Any]] = []
        while True:
            page = call(sm.list_training_jobs, **query)
            out += page.get("TrainingJobSummaries", [])
            token = page.get("NextToken")
            if not token:
                return out
            query["NextToken"] = token

    def _job(self, app_id: str) -> dict[str, Any] | None:
        try:
            region, name = parse_app_id(app_id)
        except AwsSageMakerRenderError:
            return None
        try:
            job: dict[str, Any] = call(self.client("sagemaker", region).describe_training_job,
                                       TrainingJobName=name)  # fmt: skip
        except AwsClientError:
            raise
        except Exception as e:
            if error_code(e) in ("ValidationException", "ResourceNotFound"):
                return None
            raise
        return job

    def _tags(self, region: str, arn: str) -> dict[str, str]:
        out = call(self.client("sagemaker", region).list_tags, ResourceArn=arn)
        return {str(t["Key"]): str(t["Value"]) for t in out.get("Tags", [])}

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes the training job (status, ``FailureReason``, secondary status).

        Args:
            app_id: ``region:training_job_name``.

        Returns:
            The description, or None for an unknown job.
        """
        job = self._job(app_id)
        return None if job is None else self.describe_job(app_id, job)

    def describe_job(self, app_id: str, job: dict[str, Any]) -> DescribeAppResponse:
        """What :meth:`describe` answers for a job already read (also the watch hub's view).

        Args:
            app_id: ``region:training_job_name``.
            job: Its ``DescribeTrainingJob``.

        Returns:
            The description.
        """
        region = parse_app_id(app_id)[0]
        tags = self._tags(region, str(job.get("TrainingJobArn", "")))
        state = app_state(job)
        role = tags.get(TAG_ROLE, "main")
        n = int((job.get("ResourceConfig") or {}).get("InstanceCount", 1))
        msg = status_message(job)
        failure = job_failure(job)
        key = tags.get(TAG_JOB_KEY)
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=0,
            msg=msg,
            roles=[Role(name=role, num_replicas=n)],
            roles_statuses=[
                RoleStatus(role, [ReplicaStatus(k, state, role, failure=failure) for k in range(n)])
            ],
            failure=failure,
            metadata={"training_job_arn": str(job.get("TrainingJobArn", ""))},
            job_key=None if key is None or key.startswith("h-") else key,
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The training jobs tether created in a region (tag ``tether-managed-by``).

        Args:
            cfg: ``region`` may be given here.

        Returns:
            The apps, oldest first.
        """
        region = str((cfg or {}).get("region") or self._region or resolve_region(
            None, self._profile))
        sm = self.client("sagemaker", region)
        out: builtins.list[ListAppResponse] = []
        token: str | None = None
        while True:
            page = call(sm.list_training_jobs, **({"NextToken": token} if token else {}))
            for s in page.get("TrainingJobSummaries", []):
                tags = self._tags(region, str(s["TrainingJobArn"]))
                if tags.get(TAG_MANAGED_BY) != MANAGED_BY:
                    continue
                created = s.get("CreationTime")
                key = tags.get(TAG_JOB_KEY)
                out.append(ListAppResponse(
                    app_id=f"{region}:{s['TrainingJobName']}",
                    state=app_state(s),
                    name=tags.get(TAG_APP, ""),
                    job_key=None if key is None or key.startswith("h-") else key,
                    created=created.timestamp() if isinstance(created, datetime) else None,
                ))
            token = page.get("NextToken")
            if not token:
                return sorted(out, key=lambda a: a.created or 0.0)

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
        job = self._job(app_id)
        if job is None:
            raise ValueError(f"aws_sagemaker training job {app_id!r} does not exist")
        n = int((job.get("ResourceConfig") or {}).get("InstanceCount", 1))
        if not 0 <= k < n:
            raise ValueError(f"{app_id} has replicas 0..{n - 1}")
        start = int(since.timestamp() * 1000) if since else None
        end = int(until.timestamp() * 1000) if until else None
        return filter_regex(regex, self._follow(app_id, k, start, end, should_tail))

    def _follow(self, app_id: str, k: int, start: int | None, end: int | None,
                should_tail: bool) -> Iterator[str]:
        region, name = parse_app_id(app_id)
        logs = self.client("logs", region)
        tokens: dict[str, str | None] = {}
        while True:
            job = self._job(app_id)
            done = job is None or is_terminal(app_state(job))
            try:
                found = call(logs.describe_log_streams, logGroupName=LOG_GROUP,
                             logStreamNamePrefix=f"{name}/algo-{k + 1}-")["logStreams"]
            except AwsClientError:
                raise
            except Exception as e:
                if error_code(e) != "ResourceNotFoundException":
                    raise
                found = []
            got = 0
            for stream in sorted(str(s["logStreamName"]) for s in found):
                kw: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": stream,
                                      "startFromHead": True}  # fmt: skip
                if start is not None:
                    kw["startTime"] = start
                if end is not None:
                    kw["endTime"] = end
                while True:
                    if tokens.get(stream):
                        kw["nextToken"] = tokens[stream]
                    page = call(logs.get_log_events, **kw)
                    events = page.get("events", [])
                    got += len(events)
                    for ev in events:
                        msg = str(ev.get("message", ""))
                        yield msg if msg.endswith("\n") else msg + "\n"
                    nxt = page.get("nextForwardToken")
                    if not events or nxt == tokens.get(stream):
                        tokens[stream] = nxt
                        break
                    tokens[stream] = nxt
            if not should_tail or (done and not got):
                return
            if not got:
                interrupt.pause(TAIL_POLL_S)

    # ---- stop --------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        region, name = parse_app_id(app_id)
        try:
            call(self.client("sagemaker", region).stop_training_job, TrainingJobName=name)
        except AwsClientError:
            raise
        except Exception as e:
            if error_code(e) not in ("ValidationException", "ResourceNotFound"):
                raise


def create_scheduler(session_name: str, **kwargs: Any) -> AwsSageMakerScheduler:
    """Creates the ``aws_sagemaker`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``region``, ``profile``, ``endpoint_url``.

    Returns:
        The scheduler.
    """
    return AwsSageMakerScheduler(session_name, **kwargs)
