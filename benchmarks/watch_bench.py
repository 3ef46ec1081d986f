"""Following many jobs through the watch hub, on the e2e kube-apiserver (issue 38).

For each N: N tether jobs (Kubernetes Jobs, their pods left Pending: no kubelet, so nothing
changes unless the benchmark changes it) are followed by one process through one hub, for a
window of ``--window`` seconds. Reported per N, from the apiserver's own
``apiserver_request_total`` (namespace-scope LIST/GET/WATCH of jobs and pods):

* requests per followed job per minute while following, and in all (subscribe, window,
  close); for comparison, one status poll of every job (what each trigger did every 5 s);
* the follower's CPU (process time over the window, % of one core) and memory (traced
  Python allocations per followed job);
* the latency of a change: a pod's phase set to Running through the API (as a kubelet does)
  until the subscriber hears the job RUNNING (median of ``--changes`` changes).

Run: ``python benchmarks/watch_bench.py --n 10 100 1000 2000`` (needs the kube binaries of
``make e2e-infra``). Writes the ``kubernetes_runner`` section of
``benchmarks/results/watch.{json,md}`` (rows of other N are kept). Reports only: it never
fails because of a number.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import watch_results  # noqa: E402
from tests.e2e.infra.kube import KubeCluster, create_namespace, find_binaries  # noqa: E402
from tether.schedulers.kubernetes.scheduler import KubernetesScheduler  # noqa: E402
from tether.schedulers.watch import Subscription, WatchHub  # noqa: E402
from tether.specs import AppDef, AppState, Role  # noqa: E402


def requests_counted(cluster: KubeCluster) -> int:
    """Namespace-scope LIST/GET/WATCH of jobs and pods the apiserver has counted."""
    code, text = cluster.request("/metrics", timeout=60)
    if code != 200:
        raise RuntimeError(f"/metrics answered {code}")
    total = 0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if (labels.get("resource") in ("jobs", "pods") and not labels.get("subresource")
                and labels.get("verb") in ("LIST", "GET", "WATCH")
                and labels.get("scope") == "namespace"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def submit(sched: KubernetesScheduler, ns: str, n: int) -> list[str]:
    """Submits n one-replica jobs; returns their app ids."""
    app = AppDef("bench", [Role("w", image="busybox:1.36", entrypoint="sleep", args=["1"])])
    ids = []
    for _ in range(n):
        info = sched.submit_dryrun(app, {"namespace": ns})
        ids.append(sched.schedule(info))
    return ids


def set_running(api: Any, ns: str, app_id: str) -> float:
    """Sets the app's pod Running as a kubelet would; returns when the apiserver had it."""
    from kubernetes import client

    v1 = client.CoreV1Api(api)
    name = app_id.split(":", 1)[1]
    pods = v1.list_namespaced_pod(ns, label_selector=f"tether.dev/app-id={name}").items
    pod = pods[0]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {"status": {"phase": "Running", "startTime": now, "containerStatuses": [{
        "name": pod.spec.containers[0].name, "ready": True, "restartCount": 0,
        "image": "busybox:1.36", "imageID": "", "started": True,
        "state": {"running": {"startedAt": now}}}]}}
    v1.patch_namespaced_pod_status(pod.metadata.name, ns, body)
    return time.monotonic()


def measure(cluster: KubeCluster, api: Any, n: int, window: float, changes: int) -> dict[str, Any]:
    ns = f"bench-{n}-{int(time.time())}"
    create_namespace(api, ns)
    sched = KubernetesScheduler("bench", client=api, namespace=ns)
    ids = submit(sched, ns, n)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # every job's pod exists (the job controller made it)
        pods = requests_pods(api, ns)
        if pods >= n:
            break
        time.sleep(1)
    # one poll of every job: what each follower did every poll interval before the hub
    before = requests_counted(cluster)
    for app_id in ids:
        sched.describe(app_id)
    poll_all = requests_counted(cluster) - before

    hub = WatchHub()
    tracemalloc.start()
    mem0 = tracemalloc.get_traced_memory()[0]
    before = requests_counted(cluster)
    sub = Subscription(hub)
    for app_id in ids:
        sub.follow(sched, app_id)
    heard: dict[str, AppState] = {}
    while len(heard) < n:
        ev = sub.get(timeout=300)
        if ev is None:
            raise RuntimeError(f"heard {len(heard)} of {n} jobs")
        heard[ev.app_id] = ev.state
    mem = tracemalloc.get_traced_memory()[0] - mem0
    cpu0, t0 = time.process_time(), time.monotonic()
    time.sleep(window)
    cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
    latencies = []
    for app_id in ids[:changes]:
        at = set_running(api, ns, app_id)
        while True:
            ev = sub.get(timeout=60)
            if ev is None:
                raise RuntimeError(f"no change heard for {app_id}")
            if ev.app_id == app_id and ev.state == AppState.RUNNING:
                latencies.append(time.monotonic() - at)
                break
    tracemalloc.stop()
    sub.close()
    hub.close()
    time.sleep(2.0)  # the closed watches are counted when they end
    following = requests_counted(cluster) - before - changes  # less the benchmark's own lists
    minutes = window / 60.0
    sched.close()
    return {
        "n": n,
        "requests_following": following,
        "requests_per_job_per_minute": following / n / minutes,
        "requests_one_poll_of_all": poll_all,
        "poll_every_5s_per_job_per_minute": poll_all / n * 12,
        "cpu_percent_of_one_core": 100.0 * cpu,
        "memory_kib_per_job": mem / 1024 / n,
        "change_latency_median_s": statistics.median(latencies) if latencies else None,
        "window_s": window,
    }


def requests_pods(api: Any, ns: str) -> int:
    from kubernetes import client

    return len(client.CoreV1Api(api).list_namespaced_pod(ns).items)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--window", type=float, default=60.0, help="seconds of following per N")
    ap.add_argument("--changes", type=int, default=10, help="changes timed per N")
    ap.add_argument("--out", type=Path, default=watch_results.RESULTS)
    args = ap.parse_args()
    binaries = find_binaries()
    if binaries is None:
        print("[watch-bench] kube binaries not found: run `make e2e-infra`")
        return 1
    results = []
    cluster = KubeCluster(binaries, insecure_kubeconfig=False)
    with cluster, cluster.api_client() as api:
        for n in args.n:
            r = measure(cluster, api, n, args.window, min(args.changes, n))
            print(f"[watch-bench] {json.dumps(r)}", flush=True)
            results.append(r)
    md = watch_results.update("kubernetes_runner", results, args.out)
    print(f"[watch-bench] wrote {md}")
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "watch-bench"
    sys.exit(main())
