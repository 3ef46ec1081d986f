"""``aws_sagemaker`` against moto's server.

moto RECORDS training jobs but does not run them: a created job is Completed at once, with
no container and no logs. So these tests check what is real on moto: the rendered request is
accepted by the SageMaker API, describe/list/find_jobs read it back (status, tags, instance
count), cancel of a finished job is a no-op, and the error paths (an unknown job, a duplicate
request the API refuses, with its error text). moto has no StopTrainingJob: the stop test checks
the call on the wire with a botocore ``before-send`` hook that answers it (a fake reply,
said here), the only call not served by moto. The watch hub's reader is counted by an HTTP
proxy in front of moto.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.infra.httpfault import FaultProxy
from tests.e2e.infra.moto import REGION, MotoServer
from tether.runner import Runner
from tether.schedulers.aws_sagemaker.scheduler import (
    AwsSageMakerScheduler,
    AwsSageMakerSubmitError,
)
from tether.schedulers.aws_sagemaker.watch import SageMakerReader
from tether.schedulers.watch import Subscription, WatchHub
from tether.specs import AppDef, AppState, Role, get_named_resource

pytestmark = pytest.mark.e2e

CFG = {"role_arn": "arn:aws:iam::123456789012:role/sm", "output_path": "s3://bucket/out"}


@pytest.fixture
def aws(aws_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    aws_moto.reset()
    for k, v in aws_moto.env().items():
        monkeypatch.setenv(k, v)
    yield aws_moto
    aws_moto.reset()


def app(n: int = 1) -> AppDef:
    return AppDef("fit", [Role("trainer", image="trainer:1", entrypoint="python",
                               args=["-m", "train"], num_replicas=n,
                               resource=get_named_resource("aws_g5.2xlarge"))])


def test_submit_describe_list_and_job_key(aws: MotoServer) -> None:
    with Runner(scheduler_params={"aws_sagemaker": {}}) as r:
        out = r.run_or_attach(app(2), "aws_sagemaker", CFG, job_key="dag/run 1/fit")
        again = r.run_or_attach(app(2), "aws_sagemaker", CFG, job_key="dag/run 1/fit")
        assert again.reattached and again.app_handle == out.app_handle  # Completed: kept
    s = AwsSageMakerScheduler("e2e")
    app_id = out.app_handle.split("/", 3)[-1]
    desc = s.describe(app_id)
    assert desc is not None
    assert desc.state == AppState.SUCCEEDED  # moto completes every job at once
    assert desc.job_key == "dag/run 1/fit"
    assert [len(rs.replicas) for rs in desc.roles_statuses] == [2]
    job = s.client("sagemaker", REGION).describe_training_job(
        TrainingJobName=app_id.split(":", 1)[1])
    assert job["ResourceConfig"]["InstanceType"] == "ml.g5.2xlarge"
    assert job["AlgorithmSpecification"]["TrainingImage"] == "trainer:1"
    (listed,) = s.list()
    assert listed.app_id == app_id and listed.name == "fit"
    s.cancel(app_id)  # finished: nothing to stop
    assert s.describe(f"{REGION}:no-such-job") is None


def test_error_paths(aws: MotoServer) -> None:
    s = AwsSageMakerScheduler("e2e")
    # a request the SageMaker API model refuses (botocore checks it before moto would)
    refused = r"(?s)refused training job.*MaxRuntimeInSeconds, value: 0"
    with pytest.raises(AwsSageMakerSubmitError, match=refused):
        s.submit(app(), {**CFG, "max_runtime_s": 0})
    assert s.list() == []
    with pytest.raises(ValueError, match="does not exist"):
        list(s.log_iter(f"{REGION}:no-such-job", "trainer"))


def test_stop_sends_stop_training_job(aws: MotoServer) -> None:
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield b"{}"

    s = AwsSageMakerScheduler("e2e")
    sent: list[bytes] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.body)
        return AWSResponse(request.url, 200, {}, Raw())

    s.client("sagemaker", REGION).meta.events.register(
        "before-send.sagemaker.StopTrainingJob", answer)
    s._cancel_existing(f"{REGION}:fit-abc")
    assert sent and b'"TrainingJobName": "fit-abc"' in sent[0]


def test_the_watch_hub_lists_a_region_and_describes_only_what_changed(
    aws: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls counted by an HTTP proxy in front of moto: each read is one ListTrainingJobs
    page for every followed job; a job is described the first time only (moto completes jobs
    at once, so nothing changes after); each end is heard once."""
    with FaultProxy(aws.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        s = AwsSageMakerScheduler("e2e")
        ids = [s.submit(app(), CFG) for _ in range(5)]

        def calls(since: float) -> dict[str, int]:
            out: dict[str, int] = {}
            for seen in proxy.requests(since):
                op = seen.headers.get("x-amz-target", "?").rsplit(".", 1)[-1]
                out[op] = out.get(op, 0) + 1
            return out

        reader = SageMakerReader(s, REGION)
        start = time.monotonic()
        first = reader.read(ids)
        assert {a: v.state for a, v in first.items()} == dict.fromkeys(ids, AppState.SUCCEEDED)
        assert calls(start) == {"DescribeTrainingJob": 5, "ListTags": 5, "ListTrainingJobs": 1}
        again = time.monotonic()
        for _ in range(3):
            assert set(reader.read(ids)) == set(ids)
        assert calls(again) == {"ListTrainingJobs": 3}  # nothing changed: no describe

        hub = WatchHub()
        with Subscription(hub) as sub:
            for app_id in [*ids, f"{REGION}:no-such-job"]:
                sub.follow(s, app_id)
            finals = [e for e in sub.events(timeout=120) if e.final]
        hub.close()
    assert sorted(e.app_id for e in finals if e.state == AppState.SUCCEEDED) == sorted(ids)
    (gone,) = [e for e in finals if e.gone]
    assert gone.app_id == f"{REGION}:no-such-job"
    assert len(finals) == 6
