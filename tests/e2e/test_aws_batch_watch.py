"""The watch hub on moto's AWS Batch (real containers through podman): every followed job of
a queue read with ``DescribeJobs`` in batches of 100 ids, not one call per job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.infra.moto import QUEUE, REGION, MotoServer, create_batch_queue
from tether.schedulers.aws_batch.scheduler import AwsBatchScheduler
from tether.schedulers.aws_batch.watch import BatchReader
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
