"""A Prefect flow mapping a tether task over N inputs, on the e2e kube-apiserver.

Issue 38's Prefect figure: a flow maps a component over hundreds of inputs; every task run
follows its own job. Here a real Prefect 3 server (``tests/e2e/infra/prefect.py``) records a
flow that maps :func:`~tether.adapters.prefect.component_task` (``utils.echo`` on the
``kubernetes`` scheduler) over N inputs, run in this process (Prefect's thread pool: N task
runs at once). The jobs go to the e2e kube-apiserver (``tests/e2e/infra/kube.py``: no
kubelet, so pods stay Pending until the benchmark ends them). The benchmark counts the
apiserver's requests (``apiserver_request_total``, namespace scope, less the benchmark's
own):

* over ``--window`` seconds while all N task runs wait on their jobs: per job per minute;
* over the whole flow (submission, following, the end): per job, and the reads that follow
  (LIST/GET/WATCH of jobs and pods) per job.

The jobs are then ended as a kubelet would (each pod's status set Succeeded through the
API; the job controller completes the job) and the flow must complete.

Run: ``python benchmarks/watch_prefect_bench.py --n 200`` (needs the kube binaries of
``make e2e-infra`` and prefect). Writes the ``prefect_flow`` section of
``benchmarks/results/watch.{json,md}``. Reports only: it never fails because of a number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import watch_results as results  # noqa: E402
from tests.e2e.infra.kube import KubeCluster, create_namespace, find_binaries  # noqa: E402
from tests.e2e.infra.prefect import prefect_session  # noqa: E402

NAMESPACE = "prefect-bench"


def log(msg: str) -> None:
    print(f"[prefect-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Apiserver:
    """The benchmark's own view of the apiserver; it counts its own requests, so that they
    can be taken out of the apiserver's totals."""

    def __init__(self, cluster: KubeCluster, api: Any) -> None:
        from kubernetes import client

        self.cluster = cluster
        self.v1 = client.CoreV1Api(api)
        self.own: Counter[results.RequestKey] = Counter()

    def counts(self) -> Counter[results.RequestKey]:
        code, text = self.cluster.request("/metrics", timeout=60)
        if code != 200:
            raise RuntimeError(f"/metrics answered {code}")
        return results.apiserver_requests(text)

    def pods(self) -> list[Any]:
        self.own[("LIST", "pods", "", "namespace")] += 1
        return list(self.v1.list_namespaced_pod(NAMESPACE).items)

    def succeed(self, pod: Any) -> None:
        """Sets the pod Succeeded, as a kubelet does when its container exits 0."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state = {"terminated": {"exitCode": 0, "reason": "Completed",
                                "startedAt": now, "finishedAt": now}}
        body = {"status": {"phase": "Succeeded", "startTime": now, "containerStatuses": [{
            "name": c.name, "ready": False, "restartCount": 0, "image": c.image,
            "imageID": "", "started": False, "state": state} for c in pod.spec.containers]}}
        self.own[("PATCH", "pods", "status", "resource")] += 1
        self.v1.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, body)

    def tether(self, after: Counter[results.RequestKey],
               before: Counter[results.RequestKey]) -> Counter[results.RequestKey]:
        """Requests between two snapshots, less the benchmark's own (counted meanwhile)."""
        d = results.delta(after, before)
        return Counter({k: v - self.own.get(k, 0) for k, v in d.items()
                        if v - self.own.get(k, 0) > 0})


def run_flow(n: int, outcome: dict[str, Any]) -> None:
    """Runs the mapped flow (blocks until it ends); its final state goes into ``outcome``."""
    from prefect import flow

    from tether.adapters.prefect import component_task

    echo = component_task("utils.echo", scheduler="kubernetes",
                          cfg={"namespace": NAMESPACE}, image="busybox:1.36")

    @flow(name="tether-watch-bench")
    def fan_out() -> int:
        futures = echo.map(msg=[f"input {i}" for i in range(n)])
        return sum(1 for f in futures if f.result().state.name == "SUCCEEDED")

    state = fan_out(return_state=True)
    outcome["state"] = state.type.value
    outcome["succeeded"] = state.result() if state.is_completed() else 0


def wait_pods(api: Apiserver, n: int, timeout: float, flow: threading.Thread) -> list[Any]:
    """Waits until the N jobs' pods exist (every task run submitted its job)."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        pods = api.pods()
        if len(pods) != seen:
            log(f"pods: {len(pods)} of {n}")
            seen = len(pods)
        if len(pods) >= n:
            return pods
        if not flow.is_alive():
            raise RuntimeError("the flow ended before every job was submitted")
        time.sleep(5.0)
    raise RuntimeError(f"{seen} of {n} pods after {timeout:g} s")


def measure(cluster: KubeCluster, api: Apiserver, n: int, window: float, settle: float,
            timeout: float) -> dict[str, Any]:
    start = api.counts()
    outcome: dict[str, Any] = {}
    flow = threading.Thread(target=run_flow, args=(n, outcome), name="flow", daemon=True)
    flow.start()
    pods = wait_pods(api, n, timeout, flow)
    time.sleep(settle)
    api.own.clear()
    before = api.counts()
    t0 = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    in_window = api.tether(api.counts(), before)
    for pod in api.pods():
        api.succeed(pod)
    flow.join(timeout)
    if flow.is_alive():
        raise RuntimeError("the flow did not end after its jobs did")
    time.sleep(2.0)  # closed watches are counted when they end
    whole = api.tether(api.counts(), start)
    whole_parts = results.split(whole)
    window_total = sum(in_window.values())
    parts = results.split(in_window)
    job_minutes = n * elapsed / 60.0
    return {
        "n": n,
        "pods": len(pods),
        "window_s": elapsed,
        "requests_window": window_total,
        "requests_per_job_per_minute": window_total / job_minutes,
        "follow_per_job_per_minute": parts["follow"] / job_minutes,
        "logs_per_job_per_minute": parts["logs"] / job_minutes,
        "requests_window_by_kind": results.breakdown(in_window),
        "requests_flow": sum(whole.values()),
        "requests_flow_per_job": sum(whole.values()) / n,
        "follow_requests_flow_per_job": whole_parts["follow"] / n,
        "logs_requests_flow_per_job": whole_parts["logs"] / n,
        "requests_flow_by_kind": results.breakdown(whole),
        "flow_state": outcome.get("state"),
        "jobs_succeeded": outcome.get("succeeded"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="inputs the flow maps over")
    ap.add_argument("--window", type=float, default=120.0, help="seconds counted waiting")
    ap.add_argument("--settle", type=float, default=20.0,
                    help="seconds between the last submission and the window")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for each phase")
    ap.add_argument("--out", type=Path, default=results.RESULTS)
    args = ap.parse_args()
    binaries = find_binaries()
    if binaries is None:
        print("[prefect-bench] kube binaries not found: run `make e2e-infra`")
        return 1
    root = Path(tempfile.mkdtemp(prefix="tether-prefect-bench-"))
    (root / "empty.tetherconfig").write_text("")
    with KubeCluster(binaries, insecure_kubeconfig=False) as cluster, \
            cluster.api_client() as client:
        create_namespace(client, NAMESPACE)
        os.environ.update({"KUBECONFIG": str(cluster.kubeconfig_path),
                           "TETHER_STATE_DIR": str(root / "tether-state"),
                           "TETHERCONFIG": str(root / "empty.tetherconfig")})
        with prefect_session(root / "prefect"):
            row = measure(cluster, Apiserver(cluster, client), args.n, args.window,
                          args.settle, args.timeout)
    shutil.rmtree(root, ignore_errors=True)  # kept when the run failed, to look at
    log(json.dumps(row))
    log(f"wrote {results.update('prefect_flow', [row], args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
