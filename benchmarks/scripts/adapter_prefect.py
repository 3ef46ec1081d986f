"""Prefect per-task overhead: a task running ``utils.echo`` through tether on ``local_cwd``
vs a plain Prefect task running the same command with ``subprocess``.

Prints ``{"tether": seconds per task, "native": seconds per task}`` (median over N tasks run
one after the other in one flow per side; an ephemeral Prefect API in a temporary home).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    n = max(3, args.n // 10)  # each task runs a real job: keep the case to tens of seconds

    home = tempfile.mkdtemp(dir=args.work, prefix="prefect-home-")
    os.environ.update({
        "PREFECT_HOME": home,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": os.path.join(home, "results"),
        "PREFECT_MEMO_STORE_PATH": os.path.join(home, "memo.toml"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "TETHER_STATE_DIR": os.path.join(home, "tether-state"),
    })
    os.environ.pop("PREFECT_API_URL", None)

    from prefect import flow, task

    from tether.adapters.prefect import component_task

    echo = component_task("utils.echo", scheduler="local_cwd")

    @task
    def plain_echo(msg: str) -> str:
        return subprocess.run(["echo", msg], check=True, capture_output=True, text=True).stdout

    times: dict[str, list[float]] = {"tether": [], "native": []}

    @flow
    def bench() -> None:
        for i in range(n + 1):
            for name, fn in (("native", plain_echo), ("tether", echo)):
                start = time.perf_counter()
                fn(msg=f"hi {i}")
                if i:  # the first round warms up both sides
                    times[name].append(time.perf_counter() - start)

    bench()
    medians = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, object] = dict(medians)
    overhead_ms = (medians["tether"] - medians["native"]) * 1000
    out["note"] = (f"median of {n} sequential tasks, both sides in one flow run; tether submits "
                   "a real local_cwd job (supervisor process start included), ships its log "
                   f"and waits; overhead {overhead_ms:.0f} ms/task, ratio "
                   f"{medians['tether'] / max(medians['native'], 1e-9):.1f}x")
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
