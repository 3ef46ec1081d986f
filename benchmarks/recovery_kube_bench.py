"""Recovery on Kubernetes: from a pod's infrastructure failure to the next attempt submitted.

Issue 33's Kubernetes figure: "time from the infrastructure failure being visible to the
backend to the next attempt submitted: median <= 5 s", and for failures in a row: no
duplicate attempt, no orphaned job. On the e2e control plane (``tests/e2e/infra/kube.py``:
etcd, kube-apiserver and the Job controller of kube-controller-manager 1.20) with the test
kubelet (``tests/e2e/infra/kubelet.py``), each round runs an app with a recovery policy
(``backoff_s=0``) through ``Runner.run``, a follower (``Runner.wait``, in a thread) follows
it, and once attempt 0's pod runs the kubelet evicts it (pod ``Failed``, ``Evicted``, with
the ``DisruptionTarget`` condition). The clock starts when the apiserver accepted the
eviction (the pod's new status: the failure is visible to the backend) and stops when the
chain's journal records attempt 1's handle (submitted, its Job created); the journal is
read every 20 ms. The span includes the Job controller failing attempt 0's Job, the
follower hearing it through its watch, the direct read that confirms it, the journal
writes, the render and the create of attempt 1's Job. After each round: every attempt has
exactly one Job (no duplicate), and no Job of the round is still active once the Job
controller had 30 s to record how its pods ended (no orphan).

Run: ``python benchmarks/recovery_kube_bench.py --rounds 50`` (needs the control plane's
binaries: ``tests/e2e/infra/setup.d/10-kube.sh``). Writes
``benchmarks/results/recovery_kube.{json,md}``. Reports only: it never fails because of a
number. Checkpoints are not part of this figure (the demo's ``dist.ddp`` app is).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from tests.e2e.infra.kube import KubeCluster, create_namespace, ensure_binaries  # noqa: E402
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet  # noqa: E402
from tether.runner import Runner  # noqa: E402
from tether.schedulers.kubernetes.naming import ANN_JOB_KEY  # noqa: E402
from tether.specs import AppDef, AppState, CfgVal, RecoveryPolicy, Role  # noqa: E402

NS = "recovery-bench"
SUITE = "recovery-bench"
POLL_S = 0.02
RESULTS = ROOT / "benchmarks" / "results"


def log(msg: str) -> None:
    print(f"[recovery-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _attempt(pod: client.V1Pod) -> str:
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    return str(env.get("TETHER_ATTEMPT", ""))


def _behaviour(pod: client.V1Pod) -> Behaviour:
    if _attempt(pod) == "0":
        return Behaviour.run_forever()  # until evicted
    return Behaviour.succeed(run_seconds=0.2)


def _running_pod(api: Any, kubelet: FakeKubelet, app: str, deadline_s: float = 120) -> str:
    v1 = client.CoreV1Api(api)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pod in v1.list_namespaced_pod(NS, label_selector=f"round={app}").items:
            rec = kubelet.record(NS, pod.metadata.name)
            if rec is not None and rec.state == "running" and _attempt(pod) == "0":
                return str(pod.metadata.name)
        time.sleep(0.1)
    raise RuntimeError(f"{app}: attempt 0 never ran")


def _settled_jobs(api: Any, name: str, grace_s: float = 30) -> list[Any]:
    """The round's Jobs once the Job controller recorded how each ended (tether reads a
    Job's end from its pods, which the controller's status follows a moment later), or as
    they are after ``grace_s``: a Job still active then is an orphan."""
    batch = client.BatchV1Api(api)
    deadline = time.monotonic() + grace_s
    while True:
        jobs = batch.list_namespaced_job(NS, label_selector=f"round={name}").items
        if all(not (j.status.active or 0) for j in jobs) or time.monotonic() > deadline:
            return list(jobs)
        time.sleep(0.2)


def one_round(api: Any, kubelet: FakeKubelet, runner: Runner, i: int) -> dict[str, Any]:
    """Runs, evicts and follows one app; its figures."""
    name = f"rec{i}"
    app = AppDef(name, roles=[Role("w", image="busybox:1.36", entrypoint="sleep",
                                   args=["600"])],
                 recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))  # fmt: skip
    cfg: dict[str, CfgVal] = {"namespace": NS, "labels": {"e2e-suite": SUITE, "round": name}}
    handle = runner.run(app, "kubernetes", cfg)
    final: list[Any] = []
    follower = threading.Thread(target=lambda: final.append(runner.wait(handle, 0.5, 240)))
    follower.start()
    pod = _running_pod(api, kubelet, name)
    kubelet.evict(NS, pod)
    visible = time.monotonic()
    while True:
        attempts = runner.attempts(handle)
        if len(attempts) > 1 and attempts[1]["handle"]:
            submitted = time.monotonic()
            break
        if time.monotonic() - visible > 120:
            raise RuntimeError(f"{name}: no attempt 1 after 120 s: {attempts}")
        time.sleep(POLL_S)
    follower.join(timeout=240)
    status = final[0] if final else None
    jobs = _settled_jobs(api, name)
    per_attempt: dict[str, int] = {}
    for job in jobs:
        key = (job.metadata.annotations or {}).get(ANN_JOB_KEY) or job.metadata.name
        per_attempt[key] = per_attempt.get(key, 0) + 1
    active = [j.metadata.name for j in jobs if (j.status.active or 0) > 0]
    return {
        "seconds": round(submitted - visible, 3),
        "state": status.state.name if status is not None else "UNKNOWN",
        "attempts": len(runner.attempts(handle)),
        "jobs": len(jobs),
        "duplicates": sum(n - 1 for n in per_attempt.values()),
        "orphans": len(active),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    binaries = ensure_binaries()
    if binaries is None:
        sys.exit("the control plane's binaries are missing: tests/e2e/infra/setup.d/10-kube.sh")
    state = tempfile.mkdtemp(prefix="tether-recovery-bench-")
    os.environ["TETHER_STATE_DIR"] = state
    (Path(state) / "tetherconfig.ini").write_text("")
    os.environ["TETHERCONFIG"] = str(Path(state) / "tetherconfig.ini")
    rounds: list[dict[str, Any]] = []
    with KubeCluster(binaries, insecure_kubeconfig=False) as cluster, cluster.api_client() as api:
        create_namespace(api, NS)
        with FakeKubelet(api, node_name="bench-node", label_selector=f"e2e-suite={SUITE}",
                         behaviour=_behaviour) as kubelet, \
                Runner(scheduler_params={"kubernetes": {"client": api}}) as runner:  # fmt: skip
            for i in range(args.rounds):
                r = one_round(api, kubelet, runner, i)
                log(f"round {i}: {r}")
                rounds.append(r)
    write(rounds)


def write(rounds: list[dict[str, Any]]) -> None:
    """``benchmarks/results/recovery_kube.{json,md}``."""
    secs = sorted(r["seconds"] for r in rounds)
    summary = {
        "rounds": len(rounds),
        "median_s": round(statistics.median(secs), 3),
        "p90_s": round(secs[max(0, int(len(secs) * 0.9) - 1)], 3),
        "max_s": secs[-1],
        "succeeded": sum(r["state"] == AppState.SUCCEEDED.name for r in rounds),
        "duplicates": sum(r["duplicates"] for r in rounds),
        "orphans": sum(r["orphans"] for r in rounds),
        "target": "median <= 5 s (issue 33)",
        "machine": f"{os.cpu_count()} CPUs, shared; kube-apiserver 1.20, test kubelet",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recovery_kube.json").write_text(
        json.dumps({"summary": summary, "rounds": rounds}, indent=1) + "\n")
    md = [
        "# Recovery on Kubernetes: failure visible -> next attempt submitted",
        "",
        "`python benchmarks/recovery_kube_bench.py` (see its docstring for what is timed).",
        "",
        "| rounds | median | p90 | max | succeeded | duplicate attempts | orphaned jobs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {summary['rounds']} | {summary['median_s']} s | {summary['p90_s']} s | "
        f"{summary['max_s']} s | {summary['succeeded']} | {summary['duplicates']} | "
        f"{summary['orphans']} |",
        "",
        f"Target: {summary['target']}. Machine: {summary['machine']}.",
        "",
    ]
    (RESULTS / "recovery_kube.md").write_text("\n".join(md))
    log(f"summary: {summary}")


if __name__ == "__main__":
    main()
