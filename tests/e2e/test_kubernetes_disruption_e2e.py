"""``tether run`` recovering a Kubernetes job whose pod is *deleted* under it mid-run: through
the eviction API, and by pod garbage collection after its Node was deleted.

A real kube-apiserver 1.20 with the Job controller and the pod garbage collector (``podgc``)
of a real kube-controller-manager, in a cluster of this module's own (the session's cluster
runs no ``podgc``). Kubernetes before 1.26 counts no failure for a deleted pod: the Job
controller replaces it silently. tether notices (``tether.schedulers.kubernetes.disruption``):
the follower records the Job's pod, sees it gone, stops the Job with the cause (``evicted``,
or ``node_lost`` when the pod's Node no longer exists) and, once none of the Job's pods runs,
recovers the app as its next attempt.

Test kubelets (``tests/e2e/infra/kubelet.py``) run the pods: the real node is shared by the
session and cannot be deleted, and a test kubelet's Node can be deleted with its kubelet gone,
as a lost machine's is. The eviction goes through the real eviction API (``policy/v1beta1``:
1.20 serves no ``policy/v1`` Eviction), which deletes the pod as a drain does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import DEFAULT_CONTROLLERS, KubeBinaries, KubeCluster, create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tether.schedulers.kubernetes.naming import ANN_FAILURE, ANN_POD, ANN_STOPPED

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.fake_kubelet(
        "a Node deleted with its kubelet gone (the real node is shared by the session), and "
        "pods deleted by the eviction API"
    ),
]

SUITE = "kube-disruption"
CHECKPOINT = "s3://bucket/runs/disrupted-3"

COMPONENT = """
from tether.specs import AppDef, RecoveryPolicy, Role


def train(ckpt: str) -> AppDef:
    \"\"\"A training that recovers from infrastructure failures.\"\"\"
    role = Role("trainer", image="busybox:1.36", entrypoint="sleep", args=["600"])
    return AppDef("disruptme", roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))
"""


@pytest.fixture(scope="module")
def cluster(kube_binaries: KubeBinaries) -> Iterator[KubeCluster]:
    """A control plane of this module's own, with the pod garbage collector."""
    with KubeCluster(kube_binaries, controllers=(*DEFAULT_CONTROLLERS, "podgc"),
                     insecure_kubeconfig=False) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="module")
def api(cluster: KubeCluster) -> Iterator[Any]:
    with cluster.api_client() as a:
        yield a


@pytest.fixture
def ns(api: Any, request: pytest.FixtureRequest) -> str:
    name = "d-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(api, name)
    return name


def _env(pod: client.V1Pod | client.V1PodTemplateSpec) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def _attempt(job: client.V1Job) -> str:
    """The attempt of the logical job a Job runs (its pods' ``TETHER_ATTEMPT``)."""
    return _env(job.spec.template).get("TETHER_ATTEMPT", "")


class Overlaps:
    """The test kubelets' behaviour: attempt 0 runs until disrupted, attempt 1 succeeds; and,
    when an attempt 1 pod first shows up, any attempt 0 pod that has not ended (never two
    attempts at once)."""

    def __init__(self, api: Any) -> None:
        self.v1 = client.CoreV1Api(api)
        self.seen: list[list[str]] = []

    def __call__(self, pod: client.V1Pod) -> Behaviour:
        if _env(pod).get("TETHER_ATTEMPT") == "0":
            return Behaviour.run_forever()
        pods = self.v1.list_namespaced_pod(pod.metadata.namespace).items
        live = [
            f"{p.metadata.name} {p.status.phase}" for p in pods
            if _env(p).get("TETHER_ATTEMPT") == "0"
            and p.status.phase not in ("Succeeded", "Failed")
        ]  # fmt: skip
        self.seen.append(live)
        return Behaviour.succeed(run_seconds=0.3)


def _logs(pod: client.V1Pod) -> list[str]:
    env = _env(pod)
    return [f"attempt {env.get('TETHER_ATTEMPT')} from {env.get('TETHER_CHECKPOINT')}"]


def _until(what: str, probe: Callable[[], Any], timeout: float = 240) -> Any:
    """Polls ``probe`` until it returns something truthy (the apiserver's state changing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _recorded_pod(api: Any, ns: str, kubelet: FakeKubelet) -> tuple[str, str] | None:
    """``(job, pod)`` once tether recorded attempt 0's pod and the kubelet runs it."""
    for job in client.BatchV1Api(api).list_namespaced_job(ns).items:
        value = (job.metadata.annotations or {}).get(ANN_POD, "")
        if _attempt(job) != "0" or "@" not in value:
            continue
        pod = value.split("@")[0]
        rec = kubelet.record(ns, pod)
        if rec is not None and rec.state == "running":
            return job.metadata.name, pod
    return None


def _tether(cluster: KubeCluster, tmp_path: Path) -> Callable[..., subprocess.Popen[str]]:
    (tmp_path / "comp.py").write_text(COMPONENT)
    (tmp_path / "tetherconfig.ini").write_text("")
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path),
               TETHER_STATE_DIR=str(tmp_path / "state"),
               TETHERCONFIG=str(tmp_path / "tetherconfig.ini"))  # fmt: skip

    def tether(*argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "tether.cli.main", *argv], env=env,
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip

    return tether


def _finish(proc: subprocess.Popen[str], timeout: float = 400) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"tether run did not end:\n{out}\n{err}") from None
    return proc.returncode, out, err


def _check_recovered(
    api: Any, ns: str, tether: Callable[..., subprocess.Popen[str]], result: tuple[int, str, str],
    cause: str, overlaps: Overlaps,
) -> dict[str, Any]:  # fmt: skip
    """The run's output, ``describe``, and one Job per attempt; returns attempt 0's Job."""
    code, out, err = result
    assert code == 0, out + err
    handle, *logs, final = out.splitlines()
    assert handle.startswith("chain://") and final == f"{handle} SUCCEEDED", out
    # attempt 0's log is the replacement pod's or none; attempt 1 ran from the checkpoint
    assert logs[0] == "[tether] attempt 0 on kubernetes", out
    assert logs[-2:] == ["[tether] attempt 1 on kubernetes", f"attempt 1 from {CHECKPOINT}"], out
    _, described, err = _finish(tether("describe", handle), timeout=120)
    lines = described.splitlines()
    attempts = [a.split() for a in lines[lines.index("Attempts:") + 1 :]]
    assert [a[:2] + a[3:] for a in attempts] == [
        ["0:", "kubernetes", "FAILED", f"({cause})"], ["1:", "kubernetes", "SUCCEEDED"],
    ], described + err  # fmt: skip
    jobs = sorted(client.BatchV1Api(api).list_namespaced_job(ns).items, key=_attempt)
    assert [_attempt(j) for j in jobs] == ["0", "1"]
    # attempt 1 started only once no pod of attempt 0 ran any more
    assert overlaps.seen == [[]], overlaps.seen
    return jobs[0].metadata.annotations or {}


def test_a_pod_evicted_through_the_eviction_api_is_recovered(
    cluster: KubeCluster, api: Any, ns: str, tmp_path: Path
) -> None:
    overlaps = Overlaps(api)
    with FakeKubelet(api, node_name="tether-evict-node", label_selector=f"e2e-suite={SUITE}",
                     behaviour=overlaps, logs=_logs) as kubelet:  # fmt: skip
        tether = _tether(cluster, tmp_path)
        proc = tether("run", "-s", "kubernetes", "-cfg", f"namespace={ns},labels=e2e-suite:{SUITE}",
                      "--log", "comp.py:train", "--ckpt", CHECKPOINT)  # fmt: skip
        try:
            _, pod = _until("attempt 0's pod recorded and running",
                            lambda: _recorded_pod(api, ns, kubelet))  # fmt: skip
            eviction = {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                        "metadata": {"name": pod, "namespace": ns}}  # fmt: skip
            client.CoreV1Api(api).create_namespaced_pod_eviction(
                pod, ns, eviction, _preload_content=False
            )
            result = _finish(proc)
        finally:
            proc.kill()
        ann = _check_recovered(api, ns, tether, result, "evicted", overlaps)
    assert ann[ANN_STOPPED] == "disrupted"
    failure = json.loads(ann[ANN_FAILURE])
    assert failure["cause"] == "evicted" and f"pod {pod} on node tether-evict-node" in (
        failure["reason"]
    ), failure


def test_a_pod_whose_node_is_deleted_is_recovered_as_node_lost(
    cluster: KubeCluster, api: Any, ns: str, tmp_path: Path
) -> None:
    overlaps = Overlaps(api)
    selector = f"e2e-suite={SUITE}"
    lost = FakeKubelet(api, node_name="tether-lost-node", label_selector=selector,
                       behaviour=overlaps, logs=_logs).start()  # fmt: skip
    spare: FakeKubelet | None = None
    tether = _tether(cluster, tmp_path)
    proc = tether("run", "-s", "kubernetes", "-cfg", f"namespace={ns},labels=e2e-suite:{SUITE}",
                  "--log", "comp.py:train", "--ckpt", CHECKPOINT)  # fmt: skip
    try:
        _, pod = _until("attempt 0's pod recorded and running",
                        lambda: _recorded_pod(api, ns, lost))  # fmt: skip
        # another node takes the pods from now on; the first one's kubelet dies and its
        # Node is deleted; the pod garbage collector then deletes the pod bound to it
        spare = FakeKubelet(api, node_name="tether-spare-node", label_selector=selector,
                            behaviour=overlaps, logs=_logs).start()  # fmt: skip
        lost.stop()
        result = _finish(proc)
    finally:
        proc.kill()
        lost.stop()
        if spare is not None:
            spare.stop()
    ann = _check_recovered(api, ns, tether, result, "node_lost", overlaps)
    assert ann[ANN_STOPPED] == "disrupted"
    failure = json.loads(ann[ANN_FAILURE])
    assert failure == {
        "cause": "node_lost",
        "reason": f"NodeLost: pod {pod} was deleted after its node tether-lost-node was deleted",
    }

