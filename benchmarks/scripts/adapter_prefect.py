"""Prefect per-task overhead: a task running ``utils.echo`` through tether on ``local_cwd``
vs a plain Prefect task running the same command with ``subprocess``.

Prints ``{"tether": seconds per task, "native": seconds per task, "published": seconds per
task, "same writes": seconds per task}`` (median over N tasks run one after the other in one
flow, the sides taking turns; an ephemeral Prefect API in a temporary home). ``published`` is
a plain task that also publishes one markdown artifact, as a tether task publishes its job
summary. ``same writes`` is a plain task that makes both server writes a tether task makes
before it returns, as a tether task makes them (its own client, the two requests in
parallel): the job's lines (``POST /logs/``) and the summary (``POST /artifacts/``). It runs
no job, so what a tether task costs over it is tether's own part.

The note splits the overhead: local_cwd's submit (the supervisor host hands each job to a
pre-forked spare supervisor), following the job (the job itself and local_cwd's noticing its
end, up to the moment the job's final result is known), and the adapter's own part
(everything else: materializing the AppDef, the job key, the last log lines and the summary
artifact).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefect_home import isolated_prefect_home


def write_lines_and_summary(out: str) -> None:
    """What a tether task writes to the server before it returns, written the same way: the
    job's lines and its summary artifact, in parallel, from a client of the task's own."""
    import threading
    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    assert ctx is not None
    run = ctx.task_run
    with get_client(sync_client=True) as client:
        line = {"name": "tether.job.bench", "level": 20, "message": out.rstrip("\n"),
                "timestamp": datetime.now(timezone.utc).isoformat(),
                "flow_run_id": str(run.flow_run_id), "task_run_id": str(run.id)}
        lines = threading.Thread(target=client.create_logs, args=([line],))
        lines.start()
        client.create_artifact(ArtifactCreate(
            key="same-writes-echo", type="markdown", data=f"echo: `{out.strip()}`\n",
            flow_run_id=run.flow_run_id, task_run_id=run.id,
        ))
        lines.join()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    n = max(3, args.n // 10)  # each task runs a real job: keep the case to tens of seconds

    isolated_prefect_home(args.work)

    from prefect import flow, task

    from tether.adapters.common import ComponentJob
    from tether.adapters.prefect import component_task
    from tether.runner import Runner

    echo = component_task("utils.echo", scheduler="local_cwd")

    # time spent in the scheduler's submit (local_cwd starts a supervisor process): the
    # scheduler's cost, reported apart so the adapter's own overhead is visible
    submit_times: list[float] = []
    original_schedule = Runner.schedule

    def timed_schedule(self: Runner, info: Any) -> str:
        start = time.perf_counter()
        try:
            return original_schedule(self, info)
        finally:
            submit_times.append(time.perf_counter() - start)

    setattr(Runner, "schedule", timed_schedule)  # noqa: B010

    # time spent following the job: the job's own run and local_cwd's noticing its end, up to
    # the moment its final result is known (what the adapter does after that, sending the
    # last log lines and the summary, is the adapter's)
    follow_times: list[float] = []
    original_follow = ComponentJob.follow

    def timed_follow(self: ComponentJob, *a: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        final: list[float] = []
        on_final = kw.get("on_final")

        def seen_final(result: Any) -> None:
            final.append(time.perf_counter())
            if on_final is not None:
                on_final(result)

        kw["on_final"] = seen_final
        try:
            return original_follow(self, *a, **kw)
        finally:
            follow_times.append((final[0] if final else time.perf_counter()) - start)

    setattr(ComponentJob, "follow", timed_follow)  # noqa: B010

    from prefect.artifacts import create_markdown_artifact

    @task
    def plain_echo(msg: str) -> str:
        return subprocess.run(["echo", msg], check=True, capture_output=True, text=True).stdout

    @task
    def published_echo(msg: str) -> str:
        # a plain task that also publishes one artifact, as a tether task publishes its summary
        out = subprocess.run(["echo", msg], check=True, capture_output=True, text=True).stdout
        create_markdown_artifact(markdown=f"echo: `{out.strip()}`", key="plain-echo")
        return out

    @task
    def same_writes_echo(msg: str) -> str:
        out = subprocess.run(["echo", msg], check=True, capture_output=True, text=True).stdout
        write_lines_and_summary(out)
        return out

    times: dict[str, list[float]] = {"tether": [], "native": [], "published": [],
                                     "same writes": []}
    sides = (("native", plain_echo), ("published", published_echo),
             ("same writes", same_writes_echo), ("tether", echo))

    @flow
    def bench() -> None:
        for i in range(n + 1):
            for name, fn in sides:
                start = time.perf_counter()
                fn(msg=f"hi {i}")
                if i:  # the first round warms up both sides
                    times[name].append(time.perf_counter() - start)

    bench()
    medians = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, object] = dict(medians)
    overhead_ms = (medians["tether"] - medians["native"]) * 1000
    # per tether task (the warm-up round excluded): what is neither submit nor follow
    submits, follows = submit_times[-n:], follow_times[-n:]
    rest = [t - a - b for t, a, b in zip(times["tether"], submits, follows)]
    submit_ms = statistics.median(submits) * 1000
    follow_ms = statistics.median(follows) * 1000
    adapter_ms = (statistics.median(rest) - medians["native"]) * 1000
    out["note"] = (f"median of {n} sequential tasks, both sides in one flow run; tether submits "
                   "a real local_cwd job, ships its log and waits; overhead "
                   f"{overhead_ms:.0f} ms/task (ratio "
                   f"{medians['tether'] / max(medians['native'], 1e-9):.1f}x); per task: "
                   f"{submit_ms:.0f} ms local_cwd's submit (handed to the supervisor "
                   f"host's waiting spare), {follow_ms:.0f} ms following the job (the job and its "
                   f"end seen), {adapter_ms:.0f} ms the rest over a plain task "
                   "(the adapter: AppDef, job key, last log lines, summary); "
                   f"{(medians['tether'] - medians['published']) * 1000:.0f} ms over a plain "
                   "task that publishes one artifact; "
                   f"{(medians['tether'] - medians['same writes']) * 1000:.0f} ms over a plain "
                   "task that makes the same two writes (its lines and a summary), itself "
                   f"{(medians['same writes'] - medians['native']) * 1000:.0f} ms over a plain "
                   "task")
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
