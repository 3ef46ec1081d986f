"""Crash-safe tether jobs in a Prefect 3 flow: identity, caching, cancellation, reaping.

* ``prepare`` is cached across flow runs (``cache_policy=JOB_INPUTS``): the second run of
  this script takes its result without running a job, until an input changes.
* ``train`` is followed in an async flow; five ``evaluate`` jobs run concurrently.
* Every job's key is derived from the flow run, the task, its call number and its inputs:
  rerunning the same flow run (after a crash, from the UI's Retry) re-attaches to jobs that
  are still running and takes the results of jobs that finished, never launching them twice.
* Cancelling the flow run cancels its jobs (the task ends CANCELLED); after a ``kill -9``
  of the flow process, ``tether prefect reap`` (or a rerun of the flow run) cleans up.

Run it here, jobs on ``local_cwd``::

    python examples/pipelines/prefect_resilient.py --workdir /tmp/tether-prefect-resilient
    python examples/pipelines/prefect_resilient.py --workdir /tmp/tether-prefect-resilient
    # the second run: prepare ends "Cached" (no new job), the evaluations run again

Cancelling and reaping (``docs/prefect.md`` walks through both)::

    python examples/pipelines/prefect_resilient.py --job-seconds 600 &
    prefect flow-run cancel <flow run id>   # the jobs are cancelled, the tasks end CANCELLED
    python examples/pipelines/prefect_resilient.py --job-seconds 600 &
    kill -9 $!                              # the jobs keep running, orphaned
    prefect flow-run cancel <flow run id>   # nobody is left to finish the cancellation
    python -m tether.adapters.prefect.reap -s local_cwd   # cancels the orphaned jobs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from prefect import flow

from tether.adapters.prefect import component_task
from tether.adapters.prefect.cache import JOB_INPUTS

SCHEDULER = os.environ.get("TETHER_PREFECT_SCHEDULER", "local_cwd")

PREPARE = """
import json, os, random
from tether.tracker import AppRun
random.seed(0)
data = [random.random() for _ in range(1000)]
path = os.path.join({workdir!r}, "data.json")
json.dump(data, open(path, "w"))
print("prepared", len(data), "samples", flush=True)
AppRun.run_from_env().add_output("data", path)
"""

EVALUATE = """
import json, time
from tether.tracker import AppRun
time.sleep({seconds})
data = json.load(open({data!r}))
threshold = {threshold}
score = sum(x > threshold for x in data) / len(data)
print(f"threshold {{threshold}}: {{score:.3f}}", flush=True)
AppRun.run_from_env().add_output("score", score)
"""


def make_flow(scheduler: str = SCHEDULER, job_seconds: float = 0.0) -> Any:
    """Builds the flow for one scheduler.

    Args:
        scheduler: Where the jobs run.
        job_seconds: How long each evaluation job sleeps first (time to cancel the flow
            run or kill its process while the jobs run).

    Returns:
        The async ``@flow``; it returns the scores by threshold.
    """
    prepare = component_task("utils.python", scheduler=scheduler, name="prepare",
                             cache_policy=JOB_INPUTS, asynchronous=True)
    evaluate = component_task("utils.python", scheduler=scheduler, name="evaluate",
                              retries=1, asynchronous=True)

    @flow(name="tether-resilient", retries=1)
    async def resilient(workdir: str, thresholds: list[float]) -> dict[str, float]:
        """Prepares data once (cached), then evaluates every threshold concurrently.

        Args:
            workdir: Where the data goes.
            thresholds: One evaluation job each.

        Returns:
            Score by threshold.
        """
        data = (await prepare(c=PREPARE.format(workdir=workdir))).outputs["data"]
        results = await asyncio.gather(*[
            evaluate(c=EVALUATE.format(data=data, threshold=t, seconds=job_seconds))
            for t in thresholds
        ])
        return {str(t): float(r.outputs["score"]) for t, r in zip(thresholds, results)}

    return resilient


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the flow once and prints the scores.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--thresholds", type=float, nargs="+",
                        default=[0.1, 0.3, 0.5, 0.7, 0.9])
    parser.add_argument("--scheduler", default=SCHEDULER)
    parser.add_argument("--job-seconds", type=float, default=0.0,
                        help="each evaluation job sleeps this long first (to try cancelling "
                             "and reaping while jobs run)")
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tether-prefect-resilient-")
    os.makedirs(workdir, exist_ok=True)
    if args.scheduler == "local_cwd":  # the jobs' `python` is this interpreter
        bindir = os.path.dirname(sys.executable)
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    resilient = make_flow(args.scheduler, args.job_seconds)
    scores = asyncio.run(resilient(workdir=workdir, thresholds=args.thresholds))
    for threshold, score in scores.items():
        print(f"threshold {threshold}: score {score:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
