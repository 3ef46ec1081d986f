"""The watch hub on the real Slurm cluster: one ``squeue`` (+ one ``sacct``) per read for all
followed jobs, whatever their number; every end heard exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler
from tether.schedulers.slurm.watch import SlurmReader
from tether.schedulers.watch import JobEvent, Subscription, WatchHub
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def sched(slurm_cluster: SlurmCluster) -> Iterator[SlurmScheduler]:
    s = create_scheduler("e2e", slurm_conf=str(slurm_cluster.conf))
    yield s
    s.close()


def _submit(sched: SlurmScheduler, tmp_path: Path, script: str) -> str:
    app = AppDef("w", [Role("r", entrypoint="bash", args=["-c", script])])
    return sched.schedule(sched.submit_dryrun(app, {"job_dir": str(tmp_path / "jobs")}))


def _follow_all(sched: SlurmScheduler, ids: list[str]) -> tuple[list[JobEvent], float]:
    """Follows the jobs to their ends; returns the events and commands run per read."""
    hub = WatchHub()
    with Subscription(hub) as sub:
        for app_id in ids:
            sub.follow(sched, app_id)
        events = list(sub.events(timeout=300))
        view = next(iter(hub._views.values()))
        reader = view.driver._reader
        assert isinstance(reader, SlurmReader)
        per_read = reader.commands / max(view.driver.rounds, 1)
    hub.close()
    return events, per_read


def test_one_squeue_per_read_whatever_the_number_of_jobs(
    sched: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    costs = {}
    for n in (1, 12):
        ids = [_submit(sched, tmp_path, "sleep 2") for _ in range(n)]
        events, per_read = _follow_all(sched, ids)
        finals = [e for e in events if e.final]
        assert sorted(e.app_id for e in finals) == sorted(ids)
        assert {e.state for e in finals} == {AppState.SUCCEEDED}, finals
        costs[n] = per_read
    # squeue, plus sacct when a job left the queue: never one per job
    assert costs[1] <= 2 and costs[12] <= 2, costs


def test_a_job_cancelled_out_of_band_is_heard_once(
    sched: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    long = _submit(sched, tmp_path, "sleep 300")
    short = _submit(sched, tmp_path, "exit 3")
    hub = WatchHub()
    with Subscription(hub) as sub:
        sub.follow(sched, long)
        sub.follow(sched, short)
        first = sub.get(timeout=60)
        assert first is not None
        slurm_cluster.run("scancel", long)
        events = [first, *sub.events(timeout=120)]
    hub.close()
    finals = {e.app_id: e for e in events if e.final}
    assert sum(e.final for e in events) == 2
    assert finals[long].state == AppState.CANCELLED
    assert finals[short].state == AppState.FAILED
