"""``aws_batch`` end to end against moto's server, whose Batch jobs run real containers.

moto (``tests/e2e/infra/moto.py``) implements the Batch and CloudWatch Logs APIs and runs
each job's containers through podman's Docker API (busybox image), so states, exit codes,
logs, cancellation and the multi-node environment are real. What moto does not do, and the
tests therefore do not check: retries (``retryStrategy`` is recorded, not applied), per-node
log streams (every node of a multi-node job writes to the job's one stream), SIGTERM before
SIGKILL on terminate. The throttling test injects one ``ThrottlingException`` reply with a
botocore ``before-send`` hook (moto never throttles); botocore's real retry logic then sends
the call again to moto.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.moto import QUEUE, REGION, MotoServer, create_batch_queue
from tether.runner import Runner
from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler, AwsBatchSubmitError
from tether.specs import AppDef, AppState, Role
from tether.specs.status import is_terminal

pytestmark = pytest.mark.e2e

DEADLINE_S = 180.0


@pytest.fixture
def aws(aws_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """The session's moto, reset, with a job queue and boto3 pointed at it."""
    aws_moto.reset()
    for k, v in aws_moto.env().items():
        monkeypatch.setenv(k, v)
    create_batch_queue(aws_moto.env())
    yield aws_moto
    aws_moto.reset()


def sched() -> AwsBatchScheduler:
    return AwsBatchScheduler("e2e")


def sh_role(name: str, script: str, image: str, **kw: Any) -> Role:
    return Role(name, image=image, entrypoint="sh", args=["-c", script], **kw)


def wait(s: AwsBatchScheduler, app_id: str, done: Any = lambda d: is_terminal(d.state)) -> Any:
    import time

    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        desc = s.describe(app_id)
        assert desc is not None
        if done(desc):
            return desc
        time.sleep(0.3)
    raise AssertionError(f"{app_id} did not get there: {s.describe(app_id)}")


def native_status(s: AwsBatchScheduler, app_id: str) -> str:
    desc = s.describe(app_id)
    assert desc is not None
    (job,) = s.client("batch", REGION).describe_jobs(jobs=[desc.metadata["job_id"]])["jobs"]
    return str(job["status"])


def test_cli_runs_a_container_job_and_streams_its_cloudwatch_log(aws: MotoServer) -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "tether"), "run", "-s", "aws_batch",
         "-cfg", f"queue={QUEUE}", "--log", "utils.echo", "--msg", "hello-from-batch",
         "--image", aws.image],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hello-from-batch" in out.stdout
    assert "SUCCEEDED" in out.stdout + out.stderr


def test_failed_job_has_exit_code_and_reason(aws: MotoServer) -> None:
    s = sched()
    app = AppDef("fails", [sh_role("main", "echo about-to-fail; exit 3", aws.image)])
    app_id = s.submit(app, {"queue": QUEUE})
    desc = wait(s, app_id)
    assert desc.state == AppState.FAILED
    assert "exit code 3" in desc.msg
    assert desc.roles_statuses[0].replicas[0].exit_code == 3
    assert [x.rstrip() for x in s.log_iter(app_id, "main")] == ["about-to-fail"]


@pytest.mark.parametrize("when", ["RUNNABLE", "RUNNING"])
def test_cancel(aws: MotoServer, when: str) -> None:
    s = sched()
    if when == "RUNNABLE":
        # hold each queued state for a while (moto's state manager), so the job is seen there
        aws.set_batch_transition({"progression": "time", "seconds": 4})
    app_id = s.submit(AppDef("sleeper", [sh_role("main", "sleep 300", aws.image)]),
                      {"queue": QUEUE})
    wait(s, app_id, lambda d: native_status(s, app_id) == when)
    s.cancel(app_id)
    s.cancel(app_id)  # idempotent
    desc = wait(s, app_id)
    assert desc.state == AppState.CANCELLED, desc
    assert "cancelled by tether" in desc.msg
    s.cancel(app_id)  # a finished job: nothing to do


def test_multi_node_environment(aws: MotoServer) -> None:
    script = ('echo "ENV $TETHER_ROLE_NAME $TETHER_REPLICA_ID $TETHER_NUM_REPLICAS '
              '$TETHER_RANK0_HOST ${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-main}"')
    app = AppDef("mnp", [sh_role("a", script, aws.image, num_replicas=2),
                         sh_role("b", script, aws.image)])  # fmt: skip
    s = sched()
    app_id = s.submit(app, {"queue": QUEUE})
    assert wait(s, app_id).state == AppState.SUCCEEDED
    # moto writes every node's output to the job's one stream
    lines = sorted(x.split()[1:] for x in s.log_iter(app_id, "a", 0) if x.startswith("ENV"))
    assert [x[:3] for x in lines] == [["a", "0", "2"], ["a", "1", "2"], ["b", "0", "1"]]
    main = [x for x in lines if x[4] == "main"]
    assert len(main) == 1 and main[0][:2] == ["a", "0"]
    rank0 = {x[3] for x in lines}
    assert len(rank0) == 1 and rank0 != {""}, lines  # every node agrees on rank 0's address
    assert {x[4] for x in lines if x[4] != "main"} == rank0


def test_reattach_by_job_key_and_list(aws: MotoServer) -> None:
    app = AppDef("keyed", [sh_role("main", "sleep 300", aws.image)])
    with Runner(scheduler_params={"aws_batch": {}}) as r:
        first = r.run_or_attach(app, "aws_batch", {"queue": QUEUE}, job_key="dag/run 1/t")
        again = r.run_or_attach(app, "aws_batch", {"queue": QUEUE}, job_key="dag/run 1/t")
        assert not first.reattached and again.reattached
        assert again.app_handle == first.app_handle
        s = sched()  # another process: finds the job from its tags alone
        (found,) = s.find_jobs("dag/run 1/t")
        assert first.app_handle.endswith(found.app_id)
        assert [a.app_id for a in s.list()] == [found.app_id]
        r.cancel(first.app_handle)
        assert wait(s, found.app_id).state == AppState.CANCELLED
        s.delete(found.app_id)
        assert s.describe(found.app_id) is None and s.list() == []


def test_unknown_queue_leaves_nothing_registered(aws: MotoServer) -> None:
    s = sched()
    with pytest.raises(AwsBatchSubmitError, match="Job queue no-such-queue does not exist"):
        s.submit(AppDef("lost", [sh_role("main", "true", aws.image)]), {"queue": "no-such-queue"})
    defs = s.client("batch", REGION).describe_job_definitions(status="ACTIVE")["jobDefinitions"]
    assert defs == []


def test_throttling_is_retried(aws: MotoServer) -> None:
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'

    s = sched()
    batch = s.client("batch", REGION)
    sent: list[str] = []

    def throttle_once(request: Any, **_: Any) -> AWSResponse | None:
        sent.append(request.url)
        if len(sent) == 1:
            return AWSResponse(request.url, 429, {"x-amzn-ErrorType": "ThrottlingException"},
                               Raw())  # fmt: skip
        return None  # the retry goes to moto

    batch.meta.events.register("before-send.batch.DescribeJobQueues", throttle_once)
    assert s.list() == []
    assert len(sent) == 2
