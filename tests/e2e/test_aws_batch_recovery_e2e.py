"""Recovery of an AWS Batch job whose host is terminated under it, on moto's server (its
Batch jobs run as real containers through podman).

moto cannot reclaim a spot instance or lose a host. What it can do is end a running job
with a chosen ``statusReason``: ``TerminateJob`` stops the job's container and records the
reason as the job's ``statusReason``, as AWS does for a job whose EC2 host went away
(``Host EC2 (instance i-...) terminated.``, the reason AWS documents for a reclaimed spot
instance and for any instance terminated under a job). The test terminates attempt 0 with
that reason while it runs: tether reads the cause from ``DescribeJobs`` (``host_terminated``,
an infrastructure cause the app's policy recovers from), submits attempt 1, which succeeds.
The documented reasons themselves are mapped in a table test
(``tests/schedulers/test_failure_causes.py``). A ``TerminateJob`` is the test's own act,
not the infrastructure's: the test shows what tether does once Batch reports the reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.infra.moto import QUEUE, REGION, MotoServer, create_batch_queue
from tether.runner import Runner
from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler
from tether.specs import AppDef, AppState, FailureCause, RecoveryPolicy, Role, parse_app_handle

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

HOST_GONE = "Host EC2 (instance i-0123456789abcdef0) terminated."
SCRIPT = 'echo "attempt $TETHER_ATTEMPT"; [ "$TETHER_ATTEMPT" = 0 ] && exec sleep 300; echo done'


@pytest.fixture
def aws(aws_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """The session's moto, reset, with a job queue and boto3 pointed at it."""
    aws_moto.reset()
    for k, v in aws_moto.env().items():
        monkeypatch.setenv(k, v)
    create_batch_queue(aws_moto.env())
    yield aws_moto
    aws_moto.reset()


@pytest.fixture
def runner(aws: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner(scheduler_params={"aws_batch": {}}) as r:
        yield r


def _running_job_id(runner: Runner, handle: str) -> str:
    """Attempt 0's Batch job id, once its container runs."""
    sched = AwsBatchScheduler("e2e")
    deadline = time.monotonic() + 180
    while True:
        attempts = runner.attempts(handle)
        current = attempts[-1]["handle"] if attempts else None
        status = runner.status(handle)
        if current and status is not None and status.state == AppState.RUNNING:
            desc = sched.describe(parse_app_handle(current).app_id)
            assert desc is not None
            return str(desc.metadata["job_id"])
        assert time.monotonic() < deadline, f"attempt 0 never ran: {status}"
        time.sleep(0.3)


def test_a_job_whose_host_is_terminated_is_recovered_as_the_next_attempt(
    runner: Runner, aws: MotoServer
) -> None:
    policy = RecoveryPolicy(on=(FailureCause.HOST_TERMINATED,), max_recoveries=1, backoff_s=0)
    role = Role("main", image=aws.image, entrypoint="sh", args=["-c", SCRIPT])
    app = AppDef("hostgone", roles=[role], recovery=policy)
    handle = runner.run(app, "aws_batch", {"queue": QUEUE})
    assert handle.startswith("chain://")
    job_id = _running_job_id(runner, handle)
    batch = AwsBatchScheduler("e2e").client("batch", REGION)
    batch.terminate_job(jobId=job_id, reason=HOST_GONE)

    status = runner.wait(handle, wait_interval=0.5, timeout=180)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    first, second = runner.attempts(handle)
    assert (first["state"], first["cause"]) == ("FAILED", FailureCause.HOST_TERMINATED.value)
    assert second["state"] in (None, "SUCCEEDED")  # the last one's end: the job's status
    assert first["handle"] != second["handle"]
    (job,) = batch.describe_jobs(jobs=[job_id])["jobs"]
    assert (job["status"], job["statusReason"]) == ("FAILED", HOST_GONE)
    failed = runner.status(first["handle"])
    assert failed is not None and failed.state == AppState.FAILED
    cause = failed.cause()
    assert cause is not None and cause.cause == FailureCause.HOST_TERMINATED
    assert cause.reason == HOST_GONE
    lines = [x.rstrip() for x in runner.log_lines(handle, "main")]
    assert lines == ["[tether] attempt 0 on aws_batch", "attempt 0",
                     "[tether] attempt 1 on aws_batch", "attempt 1", "done"]  # fmt: skip
