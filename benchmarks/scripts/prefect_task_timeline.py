"""Where a Prefect component task's time goes, and how long the server takes to answer it.

Runs ``utils.echo`` on ``local_cwd`` as a component task N times in one flow run, each after a
plain task (as ``adapter_prefect.py`` does), against an ephemeral Prefect API, and prints the
median moment (ms since the task call began) of each step: the job submitted, its end seen,
the summary request sent and answered, the job's line request sent and answered, the task
function returned, its ``on_completion`` hook ran, the call returned. Then, in the same flow
run, the time of one ``create_artifact`` request sent right after a plain task, and one sent
after a 30 ms pause (the server's own work for a task's state events, which reach it in the
background, is what a request right after a task waits behind).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from prefect_home import isolated_prefect_home

STAMPS: list[tuple[str, float]] = []


def stamp(name: str) -> None:
    """Records a moment of the current task call."""
    STAMPS.append((name, time.perf_counter()))


def wrap(owner: Any, attr: str, name: str) -> None:
    """Stamps ``name<`` and ``name>`` around each call of ``owner.attr``."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        stamp(name + "<")
        try:
            return original(*args, **kwargs)
        finally:
            stamp(name + ">")

    setattr(owner, attr, stamped)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    isolated_prefect_home(args.work)

    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate
    from prefect.context import FlowRunContext

    import tether.adapters.prefect.run as run
    from tether.adapters.common import JobSession
    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.logship import LogShipper

    wrap(JobSession, "launch", "submit")
    wrap(JobSession, "result", "end seen")  # the follow reads the result once it is final
    wrap(LogShipper, "_send", "line request")
    wrap(run, "_publish_summary", "summary request")
    wrap(run._TaskCall, "_follow", "function's follow")  # returns right before the function

    echo = component_task("utils.echo", scheduler="local_cwd",
                          on_completion=[lambda *_: stamp("on_completion hook")])

    @task
    def plain_echo(msg: str) -> str:
        return subprocess.run(["echo", msg], check=True, capture_output=True, text=True).stdout

    rows: list[list[tuple[str, float]]] = []
    probe: dict[str, list[float]] = {"right after a task": [], "after a 30 ms pause": []}

    def artifact(client: Any, flow_run_id: Any) -> float:
        start = time.perf_counter()
        client.create_artifact(ArtifactCreate(type="markdown", data="# probe\n",
                                              flow_run_id=flow_run_id))
        return time.perf_counter() - start

    @flow
    def timeline() -> None:
        for i in range(args.n + 3):  # three rounds warm up
            plain_echo(msg=f"hi {i}")
            STAMPS.clear()
            stamp("call")
            echo(msg=f"hi {i}")
            stamp("call returned")
            if i >= 3:
                rows.append(list(STAMPS))
        flow_run_id = FlowRunContext.get().flow_run.id  # type: ignore[union-attr]
        with get_client(sync_client=True) as client:
            for i in range(args.n):
                plain_echo(msg=f"probe {i}")
                probe["right after a task"].append(artifact(client, flow_run_id))
                time.sleep(0.03)
                probe["after a 30 ms pause"].append(artifact(client, flow_run_id))

    timeline()
    moments: dict[str, list[float]] = collections.defaultdict(list)
    for row in rows:
        start = row[0][1]
        seen: collections.Counter[str] = collections.Counter()
        for name, at in row:
            seen[name] += 1
            key = name if seen[name] == 1 else f"{name} #{seen[name]}"
            moments[key].append((at - start) * 1000)
    out = {name: round(statistics.median(ms), 2)
           for name, ms in sorted(moments.items(), key=lambda kv: statistics.median(kv[1]))}
    print(json.dumps({"task call (ms since it began)": out,
                      "create_artifact (ms)": {k: round(statistics.median(v) * 1000, 2)
                                               for k, v in probe.items()}}, indent=1))


if __name__ == "__main__":
    main()
