"""``gcp_batch``: golden CreateJobRequests and the client code against a gRPC BatchService.

Google Cloud cannot be reached here. The rendered request is golden-tested and must be
accepted by the package's own ``batch_v1.CreateJobRequest``. The scheduler's client calls go
through the real ``google-cloud-batch`` client and gRPC transport to a FAKE of the Batch
service: an in-test gRPC server implementing ``google.cloud.batch.v1.BatchService``
(CreateJob, GetJob, ListJobs with label filters, CancelJob, DeleteJob) with the package's
message types. It fakes Google's service, not tether's code. Logs (Cloud Logging) are not
tested beyond the filter.

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenDir
from tether.runner.api import Runner
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.capabilities import UnsupportedFeatureError
from tether.schedulers.gcp_batch.options import GcpBatchOpts
from tether.schedulers.gcp_batch.render import (
    GcpBatchRenderError,
    format_request,
    job_name,
    label_value,
    render,
)
from tether.schedulers.gcp_batch.scheduler import GcpBatchScheduler, log_filter
from tether.schedulers.watch import Subscription, WatchHub, resolve_target
from tether.specs import AppDef, AppState, Resource, RetryPolicy, Role, SecretRef

batch_v1 = pytest.importorskip("google.cloud.batch_v1")
grpc = pytest.importorskip("grpc")

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "gcp_batch", suffix=".json", end="\n")


def ddp_app(**kw: Any) -> AppDef:
    return AppDef(
        "train",
        [Role("trainer", image="trainer:1", entrypoint="python",
              args=["-m", "train", "--rank", "${replica_id}", "--app", "${app_id}"],
              num_replicas=2, resource=Resource(cpu=4, gpu=1, memMB=16384),
              env={"LR": "0.1", "HF_TOKEN": "sekrit"}, max_retries=2,
              retry_policy=RetryPolicy.REPLICA, **kw)],
        metadata={JOB_KEY: "dag/run 1/task"},
    )


# ---- render ------------------------------------------------------------------------------------
def test_golden_multi_replica_gpu_request() -> None:
    opts = GcpBatchOpts(project="proj", location="europe-west4", machine_type="n1-standard-8",
                        provisioning_model="SPOT", image_repo="europe-docker.pkg.dev/proj/r",
                        service_account="sa@proj.iam.gserviceaccount.com",
                        max_run_duration="3600s", labels={"team": "ml"})
    req = render(ddp_app(), opts, "proj", "train-abcd1234")
    text = format_request(req)
    assert "sekrit" not in text
    GOLDEN.check("multi_replica_gpu", text)
    # the package's own message type accepts the request as rendered
    msg = batch_v1.CreateJobRequest(req.request)
    group = msg.job.task_groups[0]
    assert (group.task_count, group.require_hosts_file) == (2, True)
    assert group.task_spec.max_retry_count == 2
    assert msg.job.allocation_policy.instances[0].policy.accelerators[0].count == 1


def test_golden_single_replica() -> None:
    app = AppDef("hello", [Role("echo", image="busybox", entrypoint="echo", args=["hi there"])])
    req = render(app, GcpBatchOpts(), "p", "hello-x")
    batch_v1.CreateJobRequest(req.request)
    GOLDEN.check("single", format_request(req))


def test_overlays_merge_last_golden_and_dryrun_shows_them() -> None:
    from tether.specs.overlays import PUT, set_overlay

    app = ddp_app()
    role = app.roles[0]
    set_overlay(role, "gcp_batch", "TaskGroup", {
        "task_spec": {"max_run_duration": "7200s",
                      "runnables": [{"barrier": {"name": "done"}}]},  # appended
        PUT("permissive_ssh"): False,
    })  # fmt: skip
    set_overlay(app, "gcp_batch", "Job", {
        "allocation_policy": {"network": {"network_interfaces": [{"network": "vpc-1"}]}},
        "labels": {"cost-center": "ml"},
        "priority": 50,
    })  # fmt: skip
    set_overlay(role, "gcp_batch", "Job", {"logs_policy": {"destination": "PATH",
                                                         "logs_path": "/mnt/logs"}})
    req = render(app, GcpBatchOpts(max_run_duration="3600s"), "proj", "train-abcd1234")
    GOLDEN.check("overlays", format_request(req))
    msg = batch_v1.CreateJobRequest(req.request)  # still a valid request
    group = msg.job.task_groups[0]
    assert group.task_spec.max_run_duration.seconds == 7200  # the overlay wins
    assert [r.barrier.name for r in group.task_spec.runnables] == ["", "done"]
    assert group.permissive_ssh is False and msg.job.priority == 50
    assert msg.job.allocation_policy.network.network_interfaces[0].network == "vpc-1"
    assert msg.job.labels["cost-center"] == "ml" and msg.job.labels["tether-managed-by"]
    assert msg.job.logs_policy.logs_path == "/mnt/logs"
    info = GcpBatchScheduler("s").submit_dryrun(app, {"project": "proj"})
    assert '"vpc-1"' in str(info) and '"logs_path": "/mnt/logs"' in str(info)


def test_overlays_cannot_change_identity_labels() -> None:
    from tether.specs.overlays import PUT, set_overlay

    app = ddp_app()
    set_overlay(app, "gcp_batch", "Job", {PUT("labels"): {"team": "x"}})
    with pytest.raises(GcpBatchRenderError, match="app 'train': gcp_batch Job overlay may not"):
        GcpBatchScheduler("s").submit_dryrun(app, {"project": "p"})


def test_task_command_sets_rank0_host_and_replica_args(tmp_path: Path) -> None:
    """The rendered shell command really expands per task (run here with sh; a stand-in
    ``python`` on PATH prints what it got)."""
    req = render(ddp_app(), GcpBatchOpts(), "p", "train-x")
    group = req.request["job"]["task_groups"][0]
    container = group["task_spec"]["runnables"][0]["container"]
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.7 vm-0\n10.0.0.8 vm-1\n")
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\necho "$TETHER_RANK0_HOST $TETHER_NUM_REPLICAS $*"\n')
    fake_python.chmod(0o755)
    env = {**group["task_environments"][1]["variables"], "BATCH_HOSTS_FILE": str(hosts),
           "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run([container["entrypoint"], *container["commands"]], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out == "10.0.0.7 2 -m train --rank 1 --app train-x\n"


def test_secrets_become_secret_manager_versions() -> None:
    role = Role("r", image="i", entrypoint="p", secrets={
        "TOKEN": SecretRef("hf-token"), "DB": SecretRef("projects/o/secrets/db", "3")})
    req = render(AppDef("x", [role]), GcpBatchOpts(), "proj", "x-1")
    spec = batch_v1.CreateJobRequest(req.request).job.task_groups[0].task_spec
    assert dict(spec.environment.secret_variables) == {
        "TOKEN": "projects/proj/secrets/hf-token/versions/latest",
        "DB": "projects/o/secrets/db/versions/3"}


def test_rejections_name_the_field() -> None:
    sched = GcpBatchScheduler("s")
    two = AppDef("x", [Role("a", image="i", entrypoint="p"), Role("b", image="i", entrypoint="p")])
    with pytest.raises(UnsupportedFeatureError, match="2 roles; gcp_batch runs at most 1"):
        sched.submit_dryrun(two, {"project": "p"})
    one = AppDef("x", [Role("a", image="i", entrypoint="p")])
    with pytest.raises(GcpBatchRenderError, match=r"provisioning_model='spt'.*SPOT\?"):
        sched.submit_dryrun(one, {"project": "p", "provisioning_model": "spt"})
    with pytest.raises(GcpBatchRenderError, match="max_run_duration='1h'"):
        sched.submit_dryrun(one, {"project": "p", "max_run_duration": "1h"})
    with pytest.raises(UnsupportedFeatureError, match="role 'a': image is empty"):
        sched.submit_dryrun(AppDef("x", [Role("a", entrypoint="p")]), {"project": "p"})


def test_missing_project_names_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(GcpBatchRenderError, match=r"project=\.\.\. or \$GOOGLE_CLOUD_PROJECT"):
        GcpBatchScheduler("s").submit_dryrun(
            AppDef("x", [Role("a", image="i", entrypoint="p")]), {})


def test_no_credentials_is_one_error_naming_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No application default credentials anywhere (no key file, no gcloud login, not on
    GCE): the first call that needs the service says how to provide them."""
    from tether.schedulers.gcp_batch.client import GcpBatchClientError

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no ADC file there
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: do not probe a metadata server
    sched = GcpBatchScheduler("s")
    with pytest.raises(GcpBatchClientError) as e:
        sched.describe("proj:us-central1:job-1")
    msg = str(e.value)
    assert msg.startswith("no Google Cloud credentials")
    assert "gcloud auth application-default login" in msg
    assert "$GOOGLE_APPLICATION_CREDENTIALS" in msg


def test_labels_are_valid_or_digested() -> None:
    assert label_value("run-1") == "run-1"
    digested = label_value("dag/run 1/task")
    assert re.match(r"^h-[0-9a-f]{40}$", digested)


def test_log_filter_selects_one_task() -> None:
    f = log_filter("p", "uid-1", 3)
    assert 'logName="projects/p/logs/batch_task_logs"' in f
    assert 'labels.job_uid="uid-1"' in f and '-group0-3/' in f


def test_registered_with_runopts_and_lazy_import() -> None:
    code = (
        "import sys\n"
        "from tether.schedulers import get_scheduler_factory\n"
        "s = get_scheduler_factory('gcp_batch')('s')\n"
        "assert 'project' in dict(s.run_opts())\n"
        "assert 'google.cloud.batch_v1' not in sys.modules\n"
    )
    import sys
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


# ---- client code against an in-test gRPC BatchService -----------------------------------------
class FakeBatchService:
    """A FAKE Google Cloud Batch service (gRPC, the package's message types)."""

    def __init__(self) -> None:
        self.jobs: dict[str, Any] = {}
        self.calls: list[str] = []
        self._n = 0

    def create(self, req: Any, ctx: Any) -> Any:
        self.calls.append("CreateJob")
        job = batch_v1.Job(req.job)
        self._n += 1
        job.name = f"{req.parent}/jobs/{req.job_id}"
        job.uid = f"uid-{self._n}"
        job.create_time = f"2026-01-01T00:00:{self._n:02d}Z"
        job.status = batch_v1.JobStatus(state=batch_v1.JobStatus.State.QUEUED, status_events=[
            batch_v1.StatusEvent(description="Job state is set from QUEUED",
                                 event_time=f"2026-01-01T00:00:{self._n:02d}Z")])
        self.jobs[job.name] = job
        return job

    def get(self, req: Any, ctx: Any) -> Any:
        self.calls.append("GetJob")
        if req.name not in self.jobs:
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Job {req.name} not found")
        return self.jobs[req.name]

    def list(self, req: Any, ctx: Any) -> Any:
        self.calls.append(f"ListJobs {req.filter}")
        want = dict(re.findall(r'labels\."([^"]+)"="([^"]*)"', req.filter))
        project = req.parent.split("/")[1]
        jobs = [j for n, j in self.jobs.items() if n.split("/")[1] == project
                and all(j.labels.get(k) == v for k, v in want.items())]
        return batch_v1.ListJobsResponse(jobs=jobs)

    def cancel(self, req: Any, ctx: Any) -> Any:
        from google.longrunning import operations_pb2

        self.calls.append("CancelJob")
        if req.name not in self.jobs:
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Job {req.name} not found")
        self.jobs[req.name].status.state = batch_v1.JobStatus.State.CANCELLED
        return operations_pb2.Operation(name=f"{req.name}/operations/cancel", done=False)

    def delete(self, req: Any, ctx: Any) -> Any:
        from google.longrunning import operations_pb2

        self.calls.append("DeleteJob")
        self.jobs.pop(req.name, None)
        return operations_pb2.Operation(name=f"{req.name}/operations/delete", done=False)

    def handler(self) -> Any:
        from google.longrunning import operations_pb2

        def h(fn: Any, req_cls: Any, resp_ser: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req_cls.deserialize, response_serializer=resp_ser)

        op = operations_pb2.Operation.SerializeToString
        return grpc.method_handlers_generic_handler("google.cloud.batch.v1.BatchService", {
            "CreateJob": h(self.create, batch_v1.CreateJobRequest, batch_v1.Job.serialize),
            "GetJob": h(self.get, batch_v1.GetJobRequest, batch_v1.Job.serialize),
            "ListJobs": h(self.list, batch_v1.ListJobsRequest,
                          batch_v1.ListJobsResponse.serialize),
            "CancelJob": h(self.cancel, batch_v1.CancelJobRequest, op),
            "DeleteJob": h(self.delete, batch_v1.DeleteJobRequest, op),
        })


@pytest.fixture
def batch_service() -> Iterator[tuple[FakeBatchService, Any]]:
    from google.cloud.batch_v1.services.batch_service.transports import BatchServiceGrpcTransport

    service = FakeBatchService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((service.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    client = batch_v1.BatchServiceClient(transport=BatchServiceGrpcTransport(channel=channel))
    try:
        yield service, client
    finally:
        channel.close()
        server.stop(grace=None)


def test_submit_describe_cancel_delete(batch_service: tuple[FakeBatchService, Any]) -> None:
    service, client = batch_service
    sched = GcpBatchScheduler("s", client=client, project="proj")
    app_id = sched.submit(ddp_app(), {"project": "proj", "location": "us-east1"})
    assert re.match(r"^proj:us-east1:train-[a-z0-9]{8}$", app_id)
    stored = next(iter(service.jobs.values()))
    assert stored.task_groups[0].task_count == 2
    desc = sched.describe(app_id)
    assert desc is not None
    assert desc.state == AppState.PENDING and desc.msg == "Job state is set from QUEUED"
    assert [len(r.replicas) for r in desc.roles_statuses] == [2]
    assert desc.job_key is None  # not a label value: only find_jobs knows it

    stored.status.state = batch_v1.JobStatus.State.FAILED
    stored.status.status_events.append(batch_v1.StatusEvent(
        description="Job state is set from RUNNING to FAILED: task 1 exited with 3",
        event_time="2026-01-01T00:01:00Z"))
    desc = sched.describe(app_id)
    assert desc is not None and desc.state == AppState.FAILED
    assert "task 1 exited with 3" in desc.msg

    stored.status.state = batch_v1.JobStatus.State.RUNNING
    sched.cancel(app_id)
    assert sched.describe(app_id).state == AppState.CANCELLED  # type: ignore[union-attr]
    sched.cancel(app_id)  # finished: no second CancelJob
    assert service.calls.count("CancelJob") == 1
    sched.delete(app_id)
    assert sched.describe(app_id) is None
    sched.delete(app_id)  # idempotent
    assert sched.describe("proj:us-east1:nope") is None


def test_list_and_reattach_by_job_key(batch_service: tuple[FakeBatchService, Any]) -> None:
    service, client = batch_service
    sched = GcpBatchScheduler("s", client=client, project="proj")
    first = sched.submit(ddp_app(), {"project": "proj"})
    runner = Runner("s", scheduler_factories={"gcp_batch": get_scheduler_factory("gcp_batch")},
                    scheduler_params={"gcp_batch": {"client": client, "project": "proj"}})
    outcome = runner.run_or_attach(ddp_app(), "gcp_batch", {"project": "proj"},
                                   job_key="dag/run 1/task")
    assert outcome.reattached and outcome.app_handle.endswith(first)
    assert len(service.jobs) == 1
    found = sched.find_jobs("dag/run 1/task")
    assert [a.app_id for a in found] == [first]
    assert found[0].job_key == "dag/run 1/task"
    other = sched.submit(AppDef("other", [Role("r", image="i", entrypoint="p")]),
                         {"project": "proj"})
    assert {a.app_id for a in sched.list()} == {first, other}
    assert any('labels."tether-job-key"' in c for c in service.calls)


def test_registered() -> None:
    assert isinstance(get_scheduler_factory("gcp_batch")("s"), GcpBatchScheduler)


def test_the_watch_hub_lists_once_per_read_for_every_followed_job(
    batch_service: tuple[FakeBatchService, Any],
) -> None:
    """Against the FAKE Batch service (GCP cannot run here): one ListJobs per read covers
    every followed job (no GetJob per job); each end is heard once; a job deleted out of band
    ends as gone after one direct read."""
    service, client = batch_service
    sched = GcpBatchScheduler("s", client=client, project="proj")
    ids = [sched.submit(ddp_app(), {"project": "proj", "location": "us-east1"})
           for _ in range(3)]  # fmt: skip
    fast = lambda s, a: dataclasses.replace(resolve_target(s, a), interval=0.1)  # noqa: E731
    hub = WatchHub(resolve=fast)
    with Subscription(hub) as sub:
        for app_id in ids:
            sub.follow(sched, app_id)
        first = [sub.get(timeout=30) for _ in ids]
        assert {e.state for e in first if e is not None} == {AppState.PENDING}
        jobs = {app_id: service.jobs[job_name(app_id)] for app_id in ids}
        jobs[ids[0]].status.state = batch_v1.JobStatus.State.SUCCEEDED
        jobs[ids[1]].status.state = batch_v1.JobStatus.State.FAILED
        del service.jobs[job_name(ids[2])]  # deleted outside tether
        finals = [e for e in sub.events(timeout=60) if e.final]
    hub.close()
    assert {e.app_id: (e.state, e.gone) for e in finals} == {
        ids[0]: (AppState.SUCCEEDED, False), ids[1]: (AppState.FAILED, False),
        ids[2]: (AppState.UNKNOWN, True)}  # fmt: skip
    assert len(finals) == 3
    assert sum(c.startswith("ListJobs") for c in service.calls) >= 2
    assert service.calls.count("GetJob") == 1  # only the deleted job's confirmation
