"""Following 1 and N Slurm jobs through the watch hub, on the real Slurm cluster.

Issue 38's Slurm figure: before the hub, every follower ran its own ``squeue``/``sacct`` per
job per poll. Here the e2e cluster (``tests/e2e/infra/slurm.py``: munged, slurmctld, two
slurmd) holds N tether jobs (``sleep``; those that do not fit stay PENDING, so nothing ends
in the window), one process follows all of them through one hub for ``--window`` seconds,
and the benchmark counts, per N:

* the Slurm commands the hub's reader ran (``squeue``, plus ``sacct`` for jobs that left the
  queue) and its reads, per minute;
* the job-information RPCs slurmctld itself counted (``sdiag``: ``REQUEST_JOB_INFO*``), per
  minute: the controller's view of the same thing;
* for comparison, the RPCs of one ``describe`` of every job (what per-job polling paid per
  poll interval).

Run: ``python benchmarks/watch_slurm_bench.py --n 1 200`` (needs Slurm:
``tests/e2e/infra/setup.d/30-slurm.sh``). Writes the ``slurm`` section of
``benchmarks/results/watch.{json,md}``. Reports only: it never fails because of a number.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import watch_results as results  # noqa: E402
from tests.e2e.infra.slurm import SlurmCluster  # noqa: E402
from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler  # noqa: E402
from tether.schedulers.slurm.watch import SlurmReader  # noqa: E402
from tether.schedulers.watch import Subscription, WatchHub  # noqa: E402
from tether.specs import AppDef, Role  # noqa: E402


def log(msg: str) -> None:
    print(f"[slurm-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def job_info_rpcs(cluster: SlurmCluster) -> int:
    """slurmctld's count of job-information RPCs (``sdiag``), since it started."""
    text = cluster.run("sdiag").stdout
    return sum(int(m) for m in re.findall(r"^\s*REQUEST_JOB_INFO\w*\s.*?count:(\d+)", text,
                                          flags=re.M))


def submit(sched: SlurmScheduler, job_dir: Path, n: int) -> list[str]:
    app = AppDef("bench", [Role("r", entrypoint="sleep", args=["3600"])])
    return [sched.schedule(sched.submit_dryrun(app, {"job_dir": str(job_dir)}))
            for _ in range(n)]


def measure(cluster: SlurmCluster, sched: SlurmScheduler, job_dir: Path, n: int,
            window: float) -> dict[str, Any]:
    ids = submit(sched, job_dir, n)
    rpc0 = job_info_rpcs(cluster)
    for app_id in ids:  # the old way: every follower's own read, once
        sched.describe(app_id)
    one_poll_rpcs = job_info_rpcs(cluster) - rpc0  # sdiag itself is a stats RPC
    hub = WatchHub()
    with Subscription(hub) as sub:
        for app_id in ids:
            sub.follow(sched, app_id)
        heard: set[str] = set()
        while len(heard) < n:  # every job's current state heard: the view is warm
            ev = sub.get(timeout=120)
            if ev is None:
                raise RuntimeError(f"heard {len(heard)} of {n} jobs")
            heard.add(ev.app_id)
        view = next(iter(hub._views.values()))
        reader = view.driver._reader
        assert isinstance(reader, SlurmReader)
        commands0, reads0 = reader.commands, view.driver.rounds
        rpc0 = job_info_rpcs(cluster)
        t0 = time.monotonic()
        time.sleep(window)
        commands, reads = reader.commands - commands0, view.driver.rounds - reads0
        rpcs = job_info_rpcs(cluster) - rpc0
        elapsed = time.monotonic() - t0
        finals = 0
        while (ev := sub.get(timeout=0)) is not None:
            finals += ev.final
    hub.close()
    cluster.cancel_all()
    minutes = elapsed / 60.0
    return {
        "n": n,
        "window_s": elapsed,
        "reads": reads,
        "commands": commands,
        "commands_per_minute": commands / minutes,
        "commands_per_job_per_minute": commands / n / minutes,
        "ctld_job_info_rpcs": rpcs,
        "ctld_job_info_rpcs_per_minute": rpcs / minutes,
        "one_describe_of_every_job_rpcs": one_poll_rpcs,
        "old_rpcs_per_minute": one_poll_rpcs * 60.0 / sched.capabilities.follow.interval,
        "jobs_ended_in_window": finals,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[1, 200])
    ap.add_argument("--window", type=float, default=60.0, help="seconds counted per N")
    ap.add_argument("--out", type=Path, default=results.RESULTS)
    args = ap.parse_args()
    rows = []
    with SlurmCluster() as cluster:
        sched = create_scheduler("bench", slurm_conf=str(cluster.conf))
        job_dir = Path(tempfile.mkdtemp(prefix="tether-slurm-bench-"))
        try:
            for n in args.n:
                row = measure(cluster, sched, job_dir, n, args.window)
                log(json.dumps(row))
                rows.append(row)
        finally:
            sched.close()
            shutil.rmtree(job_dir, ignore_errors=True)
    log(f"wrote {results.update('slurm', rows, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
