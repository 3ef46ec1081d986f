"""The watch hub on moto's AWS Batch (real containers through podman): every followed job of
a queue read with ``DescribeJobs`` in batches of 100 ids, not one call per job; a throttled
``DescribeJobs`` (an HTTP proxy in front of moto answering ``ThrottlingException``) invents
no state and loses no end."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator

import pytest

from tests.e2e.infra.httpfault import Fault, FaultProxy, Seen
from tests.e2e.infra.moto import QUEUE, REGION, MotoServer, create_batch_queue
from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler
from tether.schedulers.aws_batch.watch import BatchReader
from tether.schedulers.aws_client import MAX_ATTEMPTS
from tether.schedulers.watch import Subscription, WatchHub
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def aws(aws_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    aws_moto.reset()
    for k, v in aws_moto.env().items():
        monkeypatch.setenv(k, v)
    create_batch_queue(aws_moto.env())
    yield aws_moto
    aws_moto.reset()


def test_describe_jobs_calls_per_read_do_not_grow_with_jobs(aws: MotoServer) -> None:
    sched = AwsBatchScheduler("e2e", region=REGION)
    calls = {}
    for n, code in ((1, 0), (4, 3)):
        role = Role("r", image=aws.image, entrypoint="sh", args=["-c", f"exit {code}"])
        app = AppDef("w", [role])
        ids = [sched.schedule(sched.submit_dryrun(app, {"queue": QUEUE})) for _ in range(n)]
        hub = WatchHub()
        with Subscription(hub) as sub:
            for app_id in ids:
                sub.follow(sched, app_id)
            events = list(sub.events(timeout=300))
            view = next(iter(hub._views.values()))
            reader = view.driver._reader
            assert isinstance(reader, BatchReader)
            calls[n] = reader.describe_calls / max(view.driver.rounds, 1)
        hub.close()
        finals = [e for e in events if e.final]
        assert sorted(e.app_id for e in finals) == sorted(ids)
        want = AppState.SUCCEEDED if code == 0 else AppState.FAILED
        assert {e.state for e in finals} == {want}, finals
    assert calls[1] <= 1 and calls[4] <= 1, calls  # ceil(N / 100) per read


# ---- throttled DescribeJobs -------------------------------------------------------------------
_THROTTLED = Fault(
    429,
    json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode(),
    {"x-amzn-ErrorType": "ThrottlingException", "Content-Type": "application/json"},
)


def test_throttled_describe_jobs_invents_nothing_and_delivers_the_true_ends(
    aws: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    throttling = threading.Event()

    def inject(seen: Seen) -> Fault | None:
        return _THROTTLED if throttling.is_set() and seen.path == "/v1/describejobs" else None

    with FaultProxy(aws.endpoint) as proxy:
        proxy.inject = inject
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        sched = AwsBatchScheduler("e2e", region=REGION)
        want = {}
        for code in (0, 3):
            role = Role("r", image=aws.image, entrypoint="sh", args=["-c", f"sleep 4; exit {code}"])
            app_id = sched.schedule(sched.submit_dryrun(AppDef("w", [role]), {"queue": QUEUE}))
            want[app_id] = AppState.SUCCEEDED if code == 0 else AppState.FAILED
        boto3 = pytest.importorskip("boto3")
        direct = boto3.client("batch", region_name=REGION, endpoint_url=aws.endpoint)
        job_ids = {str(sched._job_id(a)): a for a in want}  # what the reader asks about
        hub = WatchHub()
        with Subscription(hub) as sub:
            for app_id in want:
                sub.follow(sched, app_id)
            first = sub.get(timeout=120)
            assert first is not None and not first.final, first
            throttling.set()
            start = time.monotonic()

            def ended() -> bool:
                jobs = direct.describe_jobs(jobs=list(job_ids))["jobs"]
                return all(j["status"] in ("SUCCEEDED", "FAILED") for j in jobs)

            deadline = time.monotonic() + 300
            while not (ended() and sum(s.injected for s in proxy.requests(start)) >= 4):
                assert time.monotonic() < deadline, "timed out waiting for the jobs to end"
                assert all(not e.final for e in iter(lambda: sub.get(timeout=0.5), None)), (
                    "an end was heard while DescribeJobs was throttled")
            throttling.clear()
            stopped = time.monotonic()
            finals = {}
            for ev in sub.events(timeout=300):
                if ev.final:
                    assert ev.app_id not in finals, ev  # heard once
                    finals[ev.app_id] = ev
        hub.close()
    assert {a: e.state for a, e in finals.items()} == want
    assert not any(e.gone for e in finals.values())
    during = [s for s in proxy.requests(start) if s.at < stopped]
    # only the batched read was retried: one DescribeJobs naming every followed job, never one
    # call per job, no other call; botocore's retries stop at its attempt limit
    assert {s.path for s in during} == {"/v1/describejobs"}, {s.path for s in during}
    assert all(sorted(json.loads(s.body)["jobs"]) == sorted(job_ids) for s in during)
    attempts = [int(m.group(1)) if (m := re.search(r"attempt=(\d+)", s.headers.get(
        "amz-sdk-request", ""))) else 1 for s in during]  # fmt: skip
    assert attempts and max(attempts) <= MAX_ATTEMPTS, attempts
