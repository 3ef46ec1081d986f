"""The watch hub on the real Slurm cluster: one ``squeue`` (+ one ``sacct``) per read for all
followed jobs, whatever their number; every end heard exactly once; ``squeue`` failing or
printing nothing (a shim in front of the real one) invents nothing and is backed off."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler
from tether.schedulers.slurm.watch import SlurmReader
from tether.schedulers.watch import JobEvent, Subscription, WatchHub
from tether.schedulers.watch.backoff import Backoff
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


# ---- squeue failing, then printing nothing -----------------------------------------------------
SHIM = """#!/bin/bash
# squeue in front of the real one: while {dir}/mode says so, fails as an unreachable
# controller does, or prints nothing; every run is logged with its time and mode
mode=$(cat {dir}/mode)
echo "$(date +%s.%N) $mode $*" >> {dir}/log
case "$mode" in
  fail) echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
        exit 1 ;;
  empty) exit 0 ;;
esac
exec {real} "$@"
"""


class _Shim:
    """A ``squeue`` first on ``PATH`` that injects faults in front of the real one."""

    def __init__(self, d: Path, real: str) -> None:
        self.dir = d
        d.mkdir()
        (d / "squeue").write_text(SHIM.format(dir=d, real=real))
        (d / "squeue").chmod(0o755)
        self.set("ok")

    def set(self, mode: str) -> None:
        (self.dir / "mode").write_text(mode)

    def runs(self) -> list[tuple[float, str, str]]:
        path = self.dir / "log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(float(t), mode, args) for t, mode, args in (ln.split(" ", 2) for ln in lines)]

    def count(self, mode: str) -> int:
        return sum(m == mode for _, m, _ in self.runs())


def _until(what: str, probe: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_squeue_failing_or_printing_nothing_invents_no_end_and_is_backed_off(
    sched: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    real = shutil.which("squeue")
    assert real is not None
    shim = _Shim(tmp_path / "shim", real)
    monkeypatch.setenv("PATH", f"{shim.dir}{os.pathsep}{os.environ['PATH']}")
    flag = tmp_path / "finish"
    long = _submit(sched, tmp_path, "sleep 300")
    ends = _submit(sched, tmp_path, f"while [ ! -e {flag} ]; do sleep 0.2; done; exit 3")
    hub = WatchHub()
    with Subscription(hub) as sub:
        sub.follow(sched, long)
        sub.follow(sched, ends)
        heard: dict[str, AppState] = {}
        while set(heard.values()) != {AppState.RUNNING} or len(heard) < 2:
            ev = sub.get(timeout=120)
            assert ev is not None, heard
            heard[ev.app_id] = ev.state
        shim.set("fail")
        flag.touch()  # the job ends while squeue cannot say so
        _until("three failed squeue runs", lambda: shim.count("fail") >= 3)

        def ended() -> bool:
            out = subprocess.run([real, "--noheader", "--states=all", f"--jobs={ends}",
                                  "--format=%T"], env=slurm_cluster.env(), text=True,
                                 capture_output=True).stdout  # fmt: skip
            return out.strip() == "FAILED"

        _until("the job to end", ended)
        shim.set("empty")
        _until("three empty squeue runs", lambda: shim.count("empty") >= 3)
        assert sub.get(timeout=0.5) is None  # nothing invented: no end, no "gone"
        shim.set("ok")
        ev = sub.get(timeout=120)
        while ev is not None and ev.app_id == long and not ev.final:
            ev = sub.get(timeout=120)
        assert ev is not None
        assert ev.app_id == ends and ev.state == AppState.FAILED and not ev.gone, ev
        assert sub.get(timeout=2.0) is None  # heard once; the other job is still running
    hub.close()
    sched.cancel(long)
    # the runs about these jobs (any other squeue of this process goes through the shim too:
    # a reader of an earlier test's jobs, a describe)
    runs = [r for r in shim.runs() if _jobs_asked(r[2]) & {long, ends}]
    faulty = [(t, m, a) for t, m, a in runs if m != "ok"]
    # one squeue for both jobs each time, never one per job (no confirmation was asked)
    assert all(a.endswith(f"--jobs={','.join(sorted([long, ends]))}") for _, _, a in faulty), faulty
    # backed off: after the j-th failure in a row, at least the backoff's floor (half of its
    # limit, which doubles from base to cap: how many failures there are before squeue
    # shows the job's end depends on the machine's load)
    policy = Backoff()
    first = next(i for i, (_, m, _) in enumerate(runs) if m != "ok")
    in_a_row = runs[first:first + len(faulty) + 1]
    for j, (a, b) in enumerate(itertools.pairwise(in_a_row), start=1):
        floor = min(policy.cap, policy.base * 2 ** (j - 1)) / 2
        assert b[0] - a[0] >= floor - 0.05, (j, b[0] - a[0], floor)


def _jobs_asked(args: str) -> set[str]:
    """The job ids of an squeue command line's ``--jobs=``."""
    return {i for tok in args.split() if tok.startswith("--jobs=")
            for i in tok.split("=", 1)[1].split(",")}  # fmt: skip
