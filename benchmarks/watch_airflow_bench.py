"""The real Airflow 3 triggerer following N deferred tether tasks on the e2e kube-apiserver.

Issue 38's first figure: before the watch hub, each deferred tether task's trigger polled
its own job (a reconcile and a status read every 5 s: 48 apiserver requests per followed
job per minute). Here a real Airflow deployment (api-server, scheduler, dag-processor,
triggerer; ``tests/e2e/infra/airflow.py``) runs one DAG of N deferrable
:class:`~tether.adapters.airflow.ComponentOperator` tasks on the ``kubernetes`` scheduler
against the e2e kube-apiserver (``tests/e2e/infra/kube.py``: no kubelet, so every pod
stays Pending and every job stays in flight). Each task submits its job and defers; once
all N are deferred and the triggerer reports N triggers running, the benchmark counts, over
``--window`` seconds:

* the apiserver's requests (``apiserver_request_total``, namespace scope: tether's; the
  controllers watch at cluster scope), per followed job per minute, against the old 48;
* the triggerer's CPU (its process group, % of one core) and resident memory.

By default the tasks stream their jobs' logs into the task log (the operator's default);
``--no-stream-logs`` measures the following alone.

It also records the requests of the whole run (submission included) by verb and resource.
Run: ``python benchmarks/watch_airflow_bench.py --n 200`` (needs the kube binaries of
``make e2e-infra`` and apache-airflow). Writes the ``airflow_triggerer`` section of
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
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import watch_results as results  # noqa: E402
from tests.e2e.infra.airflow import AirflowStack  # noqa: E402
from tests.e2e.infra.kube import KubeCluster, create_namespace, find_binaries  # noqa: E402

DAG = ROOT / "benchmarks" / "airflow_dags" / "tether_watch_bench.py"
DAG_ID = "tether_watch_bench"
NAMESPACE = "airflow-bench"


class BenchStack(AirflowStack):
    """The e2e Airflow deployment with a triggerer that takes every trigger of the run.

    Args:
        capacity: Triggers the triggerer runs at once.
        *args: As :class:`AirflowStack`.
        **kwargs: As :class:`AirflowStack`.
    """

    def __init__(self, capacity: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._capacity = capacity

    def _make_env(self) -> dict[str, str]:
        env = super()._make_env()
        env["AIRFLOW__TRIGGERER__DEFAULT_CAPACITY"] = str(self._capacity)
        env["AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG"] = str(self._capacity)
        return env

    def pgid(self, component: str) -> int:
        """The process group of a component (each runs in its own)."""
        return self._procs[component].pid


def log(msg: str) -> None:
    print(f"[airflow-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def counts(cluster: KubeCluster) -> Counter[results.RequestKey]:
    code, text = cluster.request("/metrics", timeout=60)
    if code != 200:
        raise RuntimeError(f"/metrics answered {code}")
    return results.apiserver_requests(text)


def task_states(stack: AirflowStack, run_id: str) -> Counter[str]:
    """How many of the run's task instances are in each state."""
    states: Counter[str] = Counter()
    offset = 0
    while True:
        page = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances"
                         f"?limit=100&offset={offset}")
        for ti in page["task_instances"]:
            states[str(ti["state"])] += 1
        offset += len(page["task_instances"])
        if not page["task_instances"] or offset >= page["total_entries"]:
            return states


def triggers_running(stack: AirflowStack) -> int:
    """The triggerer's latest "N triggers currently running" (logged once a minute)."""
    text = stack.log_path("triggerer").read_text(errors="replace")
    found = re.findall(r"(\d+) triggers currently running", text)
    return int(found[-1]) if found else 0


def wait_all_deferred(stack: AirflowStack, run_id: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        states = task_states(stack, run_id)
        line = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
        if line != last:
            log(f"task instances: {line}")
            last = line
        bad = {s: c for s, c in states.items() if s in ("failed", "upstream_failed", "success")}
        if bad:
            raise RuntimeError(f"tasks ended before the window: {bad}\n{stack.tail(3000)}")
        if states.get("deferred", 0) >= n:
            return
        time.sleep(5.0)
    raise RuntimeError(f"not all {n} tasks deferred in {timeout:g} s: {last}")


def wait_triggers(stack: AirflowStack, n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = triggers_running(stack)
        if running >= n:
            return running
        time.sleep(5.0)
    return triggers_running(stack)


def measure(cluster: KubeCluster, stack: BenchStack, n: int, window: float,
            settle: float, timeout: float, stream_logs: bool) -> dict[str, Any]:
    start = counts(cluster)
    run_id = f"bench-{int(time.time())}"
    stack.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                  {"dag_run_id": run_id, "logical_date": None, "conf": {}})
    t0 = time.monotonic()
    wait_all_deferred(stack, run_id, n, timeout)
    deferred_after = time.monotonic() - t0
    running = wait_triggers(stack, n, 180.0)
    log(f"all {n} deferred after {deferred_after:.0f} s; triggers running: {running}")
    time.sleep(settle)
    pids = results.group_pids(stack.pgid("triggerer"))
    before = counts(cluster)
    cpu0, w0 = results.cpu_seconds(pids), time.monotonic()
    time.sleep(window)
    cpu1, elapsed = results.cpu_seconds(pids), time.monotonic() - w0
    after = counts(cluster)
    rss = results.rss_kib(results.group_pids(stack.pgid("triggerer")))
    states = task_states(stack, run_id)
    in_window = results.delta(after, before)
    total = sum(in_window.values())
    parts = results.split(in_window)
    job_minutes = n * elapsed / 60.0
    per_job_minute = total / job_minutes
    return {
        "case": f"{n}{'' if stream_logs else ' logs off'}",
        "n": n,
        "stream_logs": stream_logs,
        "triggers_running": max(running, triggers_running(stack)),
        "deferred_during_window": states.get("deferred", 0),
        "window_s": elapsed,
        "requests_window": total,
        "requests_per_job_per_minute": per_job_minute,
        "old_per_job_per_minute": results.OLD_TRIGGER_PER_JOB_MINUTE,
        "reduction": (results.OLD_TRIGGER_PER_JOB_MINUTE / per_job_minute
                      if per_job_minute else None),
        "follow_per_job_per_minute": parts["follow"] / job_minutes,
        "logs_per_job_per_minute": parts["logs"] / job_minutes,
        "requests_window_by_kind": results.breakdown(in_window),
        "requests_whole_run_by_kind": results.breakdown(results.delta(after, start)),
        "triggerer_cpu_percent": 100.0 * (cpu1 - cpu0) / elapsed,
        "triggerer_rss_kib": rss,
        "seconds_until_all_deferred": deferred_after,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="deferred tasks (one DAG run)")
    ap.add_argument("--window", type=float, default=180.0, help="seconds counted")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds between all triggers running and the window")
    ap.add_argument("--parallelism", type=int, default=4, help="LocalExecutor slots")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds allowed for all tasks to defer")
    ap.add_argument("--no-stream-logs", dest="stream_logs", action="store_false",
                    help="the tasks' stream_logs=False: the triggers only follow the jobs")
    ap.add_argument("--out", type=Path, default=results.RESULTS)
    args = ap.parse_args()
    binaries = find_binaries()
    if binaries is None:
        print("[airflow-bench] kube binaries not found: run `make e2e-infra`")
        return 1
    root = Path(tempfile.mkdtemp(prefix="tether-airflow-bench-"))
    with KubeCluster(binaries, insecure_kubeconfig=False) as cluster:
        create_namespace(cluster, NAMESPACE)
        (root / "empty.tetherconfig").write_text("")
        env = {
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "TETHER_STATE_DIR": str(root / "tether-state"),
            "TETHERCONFIG": str(root / "empty.tetherconfig"),
            "TETHER_BENCH_N": str(args.n),
            "TETHER_BENCH_NAMESPACE": NAMESPACE,
            "TETHER_BENCH_STREAM_LOGS": "1" if args.stream_logs else "0",
        }
        stack = BenchStack(args.n + 50, root, [DAG], env=env, parallelism=args.parallelism)
        with stack:
            row = measure(cluster, stack, args.n, args.window, args.settle, args.timeout,
                          args.stream_logs)
    shutil.rmtree(root, ignore_errors=True)  # kept when the run failed, to look at
    log(json.dumps(row))
    log(f"wrote {results.update('airflow_triggerer', [row], args.out, key='case')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
