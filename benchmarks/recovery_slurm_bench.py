"""Recovery on the real Slurm cluster: how soon the next attempt follows an infrastructure
failure, and whether 50 failures in a row leave a duplicate, an orphan or a lost checkpoint.

Issue 33's Slurm figures. The e2e cluster (``tests/e2e/infra/slurm.py`` with its preempting
``urgent`` partition) runs one logical job with ``RecoveryPolicy(max_recoveries=N,
backoff_s=0)``; one follower (``Runner.wait``, in a thread, with the scheduler's own
following: the watch hub reads ``squeue`` every ``follow.interval`` seconds) drives it.
Each attempt reads the step count from ``$TETHER_CHECKPOINT``, saves step + 1 (written
aside and renamed) and waits; the benchmark then fails it, alternately by setting its node
DOWN (``NODE_FAIL``; the node is resumed once the failure is seen) and by preempting it
with an exclusive job of the urgent partition (``PREEMPTED``), each at a random moment within
one follow interval of the attempt's start (the follower submits each attempt right after
one of its reads, so a failure at a fixed delay after the start would always wait the same
part of the interval). Attempt N runs to the end.

Measured, per failure, by one observer thread that lists the cluster's jobs with ``squeue``
every 0.2 s (the same lag on both ends, so the difference is fair to about that):

* **latency**: from the first listing where Slurm shows attempt i ended (the failure is
  visible to the backend) to the first listing that shows attempt i + 1 (submitted). Slurm's
  own clock gives a second figure, whole seconds only: attempt i + 1's ``SubmitTime`` minus
  attempt i's ``EndTime``;
* **duplicate attempts**: Slurm jobs of the logical job beyond one per attempt;
* **orphaned jobs**: jobs of the logical job still pending or running once it is over, or
  jobs no attempt records;
* **lost checkpoints**: attempts that did not find the step count of every earlier attempt
  (attempt i must read i).

Run: ``python benchmarks/recovery_slurm_bench.py --failures 50`` (needs Slurm:
``tests/e2e/infra/setup.d/30-slurm.sh``). Writes ``benchmarks/results/recovery_slurm.json``
and ``.md`` (the Kubernetes figures, when measured, go in files of their own). Reports only:
it never fails because of a number.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e import slurm_recovery as rec  # noqa: E402
from tests.e2e.infra.slurm import SlurmCluster  # noqa: E402
from tether.runner import Runner  # noqa: E402
from tether.schedulers.slurm.scheduler import create_scheduler  # noqa: E402
from tether.specs import AppDef, RecoveryPolicy, Role, parse_app_handle  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
NAME = "recbench"
POLL_S = 0.2
SCRIPT = """\
set -eu
mkdir -p "$TETHER_CHECKPOINT"
n=$(cat "$TETHER_CHECKPOINT/step" 2>/dev/null || echo 0)
echo "attempt $TETHER_ATTEMPT found step $n"
echo $((n + 1)) > "$TETHER_CHECKPOINT/step.tmp"
mv "$TETHER_CHECKPOINT/step.tmp" "$TETHER_CHECKPOINT/step"
if [ "$TETHER_ATTEMPT" -lt "$FAILURES" ]; then exec sleep 3600; fi
"""


def log(msg: str) -> None:
    print(f"[recovery-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Observer(threading.Thread):
    """Lists the logical job's Slurm jobs every :data:`POLL_S` seconds and keeps when each
    job, and each job's end, was first seen."""

    def __init__(self, cluster: SlurmCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.first_seen: dict[str, float] = {}
        self.ended_seen: dict[str, float] = {}
        self.states: dict[str, str] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            now = time.monotonic()
            for job, (state, *_) in rec.jobs(self.cluster, NAME).items():
                self.first_seen.setdefault(job, now)
                self.states[job] = state
                if state in rec.ENDED:
                    self.ended_seen.setdefault(job, now)
            self.halt.wait(POLL_S)


def _slurm_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def _wait_step(ckpt: Path, step: int) -> None:
    """Waits until attempt ``step - 1`` saved its step (it runs and holds)."""
    deadline = time.monotonic() + rec.WAIT_S
    while time.monotonic() < deadline:
        try:
            if int((ckpt / "step").read_text()) >= step:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"attempt {step - 1} never saved its step")


def _inject(cluster: SlurmCluster, observer: Observer, i: int) -> str:
    """Fails attempt ``i`` (DOWN for even ``i``, preemption for odd); returns the kind."""
    running = [(j, s) for j, s in rec.jobs(cluster, NAME).items() if s[0] == "RUNNING"]
    if len(running) != 1:
        raise RuntimeError(f"attempt {i}: expected one running job, got {running}")
    job, (_, _, _, node) = running[0]
    if i % 2 == 0:
        undo = rec.set_down(cluster, node)
        kind = "node_down"
    else:
        undo = rec.preempt(cluster, node, seconds=1)
        kind = "preempted"
    deadline = time.monotonic() + rec.WAIT_S
    while job not in observer.ended_seen:
        if time.monotonic() > deadline:
            raise RuntimeError(f"attempt {i} ({job}) did not end after {kind}")
        time.sleep(0.05)
    if kind == "node_down":
        undo()  # the node back for later attempts (the urgent job of a preemption just ends)
    return kind


def measure(cluster: SlurmCluster, work: Path, failures: int) -> dict[str, Any]:
    ckpt = work / "ckpt"
    role = Role("w", entrypoint="bash", args=["-c", SCRIPT], env={"FAILURES": str(failures)})
    app = AppDef(NAME, roles=[role], checkpoint=str(ckpt),
                 recovery=RecoveryPolicy(max_recoveries=failures, backoff_s=0))  # fmt: skip
    params = {"slurm": {"slurm_conf": str(cluster.conf)}}
    interval = create_scheduler("bench").capabilities.follow.interval
    jitter = random.Random(33)
    observer = Observer(cluster)
    observer.start()
    with Runner("bench", scheduler_params=params) as runner:
        handle = runner.run(app, "slurm", {"job_dir": str(work / "jobs")})
        result: dict[str, Any] = {}
        follower = threading.Thread(
            target=lambda: result.update(final=runner.wait(handle, timeout=3600)), daemon=True
        )
        follower.start()
        kinds = []
        for i in range(failures):
            _wait_step(ckpt, i + 1)
            time.sleep(jitter.uniform(0, interval))  # not in step with the follower's reads
            kinds.append(_inject(cluster, observer, i))
            log(f"failure {i + 1}/{failures}: {kinds[-1]}")
        follower.join(timeout=rec.WAIT_S)
        final = result.get("final")
        attempts = runner.attempts(handle)
        found = [int(line.split()[-1]) for line in runner.log_lines(handle, "w")
                 if line.startswith("attempt ") and " found step " in line]  # fmt: skip
    time.sleep(2 * POLL_S)
    observer.halt.set()
    observer.join()
    ids = [parse_app_handle(a["handle"]).app_id for a in attempts if a["handle"]]
    slurm_jobs = rec.jobs(cluster, NAME)
    pairs = list(itertools.pairwise(ids))
    latencies = [observer.first_seen[b] - observer.ended_seen[a] for a, b in pairs]
    clock = [_slurm_time(slurm_jobs[b][1]) - _slurm_time(slurm_jobs[a][2]) for a, b in pairs]
    orphans = [j for j, s in slurm_jobs.items() if s[0] not in rec.ENDED or j not in ids]
    return {
        "failures": failures,
        "kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
        "final_state": None if final is None else final.state.name,
        "attempts": len(attempts),
        "slurm_jobs": len(slurm_jobs),
        "duplicate_attempts": len(slurm_jobs) - len(set(ids)),
        "orphaned_jobs": len(orphans),
        "lost_checkpoints": sum(1 for i, n in enumerate(found) if n != i)
        + (len(attempts) - len(found)),
        "latency_s": _summary(latencies),
        "latency_slurm_clock_s": _summary(clock),
        "follow_interval_s": interval,
        "observer_poll_s": POLL_S,
    }


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(values), "median": statistics.median(values),
            "p90": ordered[max(0, int(0.9 * len(ordered)) - 1)], "max": ordered[-1],
            "min": ordered[0]}  # fmt: skip


def render(row: dict[str, Any]) -> str:
    lat, clock = row["latency_s"], row["latency_slurm_clock_s"]
    kinds = ", ".join(f"{n} {k}" for k, n in row["kinds"].items())
    on_clock = f"{clock.get('median', 0):.1f} / {clock.get('max', 0):.1f}"
    return f"""# Recovery on Slurm (issue 33)

Real Slurm 22.05 cluster of the e2e tests (two slurmd nodes on one host, a preempting
partition), one logical job with `RecoveryPolicy(max_recoveries={row["failures"]},
backoff_s=0)` followed by one `Runner.wait`. See `benchmarks/recovery_slurm_bench.py` for
the method.

| Figure | Value |
|---|---|
| failures injected in a row | {row["failures"]} ({kinds}) |
| failure visible to Slurm -> next attempt submitted, median s | {lat.get("median", 0):.2f} |
| same, p90 / max s | {lat.get("p90", 0):.2f} / {lat.get("max", 0):.2f} |
| same on Slurm's clock (whole seconds), median / max s | {on_clock} |
| attempts / Slurm jobs | {row["attempts"]} / {row["slurm_jobs"]} |
| duplicate attempts | {row["duplicate_attempts"]} |
| orphaned jobs | {row["orphaned_jobs"]} |
| lost checkpoints | {row["lost_checkpoints"]} |
| final state | {row["final_state"]} |

The follower hears of a job's end through the watch hub, which reads `squeue` every
{row["follow_interval_s"]:.0f} s (the `slurm` scheduler's `follow.interval`): most of the
latency is waiting for that read (half an interval on average: each failure comes at a
random moment of the interval); the rest is the direct read that confirms the cause and the
next `sbatch`. Latencies are measured by an observer listing the jobs every
{row["observer_poll_s"]} s.

Reproduce: `python benchmarks/recovery_slurm_bench.py --failures {row["failures"]}`.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--failures", type=int, default=50)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tether-recovery-bench-"))
    os.environ["TETHER_STATE_DIR"] = str(work / "state")
    (work / "tetherconfig.ini").write_text("")
    os.environ["TETHERCONFIG"] = str(work / "tetherconfig.ini")
    try:
        with SlurmCluster(preemption=True) as cluster:
            row = measure(cluster, work, args.failures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(json.dumps(row))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recovery_slurm.json").write_text(json.dumps(row, indent=1) + "\n")
    (args.out / "recovery_slurm.md").write_text(render(row))
    log(f"wrote {args.out / 'recovery_slurm.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
