"""``tether run`` recovering a Kubernetes job whose pod is evicted mid-run, on a real
kube-apiserver (the CLI in its own process, through a kubeconfig, as a user runs it).

A test kubelet (``tests/e2e/infra/kubelet.py``) runs the pods and evicts attempt 0's pod the
way a kubelet under node pressure does (pod ``Evicted``, ``DisruptionTarget:
TerminationByKubelet``); the Job controller fails its Job. ``tether run`` is the follower: it
reads the cause (``evicted``, an infrastructure cause the app's policy recovers from),
submits attempt 1 and ends when attempt 1 succeeds, all under one logical handle. The
module fills the ``kubernetes`` cell of the portability matrix's recovery row
(``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import KubeCluster, create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tests.e2e.matrix.table import RECOVERY, recovery_cell, write_doc

# The test kubelet, not the real node: the eviction comes at a chosen moment, which a real
# kubelet does only under real node pressure.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.fake_kubelet("an eviction at a chosen moment, with its DisruptionTarget"),
]

SUITE = "kubernetes-recovery"
CHECKPOINT = "s3://bucket/runs/evicted-7"

COMPONENT = """
from tether.specs import AppDef, RecoveryPolicy, Role


def train(ckpt: str) -> AppDef:
    \"\"\"A training that recovers from infrastructure failures.\"\"\"
    role = Role("trainer", image="busybox:1.36", entrypoint="sleep", args=["600"])
    return AppDef("evictme", roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))
"""


def _env(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def _behaviour(pod: client.V1Pod) -> Behaviour:
    if _env(pod).get("TETHER_ATTEMPT") == "0":
        return Behaviour.run_forever()  # until evicted
    return Behaviour.succeed(run_seconds=0.3)


def _logs(pod: client.V1Pod) -> list[str]:
    env = _env(pod)
    return [f"attempt {env.get('TETHER_ATTEMPT')} from {env.get('TETHER_CHECKPOINT')}"]


OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    if OUTCOMES:
        how = "a pod evicted (`DisruptionTarget`), through `tether run`; test kubelet"
        write_doc({(RECOVERY, "kubernetes"): recovery_cell("kubernetes", OUTCOMES, how)})


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[FakeKubelet]:
    with FakeKubelet(
        kube_api, node_name="tether-recovery-node", label_selector=f"e2e-suite={SUITE}",
        behaviour=_behaviour, logs=_logs,
    ) as kl:  # fmt: skip
        yield kl


@pytest.fixture
def ns(kube_api: Any, request: pytest.FixtureRequest) -> str:
    name = "r-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    return name


def _evict_attempt_zero(kube_api: Any, kubelet: FakeKubelet, ns: str, evicted: list[str]) -> None:
    v1 = client.CoreV1Api(kube_api)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        for pod in v1.list_namespaced_pod(ns).items:
            rec = kubelet.record(ns, pod.metadata.name)
            if rec is not None and rec.state == "running" and _env(pod)["TETHER_ATTEMPT"] == "0":
                kubelet.evict(ns, pod.metadata.name)
                evicted.append(pod.metadata.name)
                return
        time.sleep(0.2)


def test_tether_run_recovers_an_evicted_pod_as_the_next_attempt(
    kube_cluster: KubeCluster,
    kube_api: Any,
    kubelet: FakeKubelet,
    ns: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    OUTCOMES[request.node.name] = False
    (tmp_path / "comp.py").write_text(COMPONENT)
    (tmp_path / "tetherconfig.ini").write_text("")
    env = dict(os.environ, KUBECONFIG=str(kube_cluster.kubeconfig_path),
               TETHER_STATE_DIR=str(tmp_path / "state"),
               TETHERCONFIG=str(tmp_path / "tetherconfig.ini"))  # fmt: skip

    def tether(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether.cli.main", *argv], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=240,
                              check=False)  # fmt: skip

    evicted: list[str] = []
    evictor = threading.Thread(target=_evict_attempt_zero,
                               args=(kube_api, kubelet, ns, evicted), daemon=True)  # fmt: skip
    evictor.start()
    cfg = f"namespace={ns},labels=e2e-suite:{SUITE}"
    res = tether("run", "-s", "kubernetes", "-cfg", cfg, "--log", "comp.py:train", "--ckpt",
                 CHECKPOINT)  # fmt: skip
    evictor.join(timeout=30)
    assert evicted, "attempt 0 never ran"
    assert res.returncode == 0, res.stdout + res.stderr
    handle, *logs, final = res.stdout.splitlines()
    assert handle.startswith("chain://") and final == f"{handle} SUCCEEDED", res.stdout
    assert logs == [
        "[tether] attempt 0 on kubernetes", f"attempt 0 from {CHECKPOINT}",
        "[tether] attempt 1 on kubernetes", f"attempt 1 from {CHECKPOINT}",
    ], res.stdout  # fmt: skip

    described = tether("describe", handle)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    attempts = [a.split() for a in lines[lines.index("Attempts:") + 1 :]]
    assert [a[:2] + a[3:] for a in attempts] == [
        ["0:", "kubernetes", "FAILED", "(evicted)"], ["1:", "kubernetes", "SUCCEEDED"],
    ], described.stdout  # fmt: skip
    status = tether("status", handle)
    assert "attempt 1 on kubernetes (earlier: attempt 0 on kubernetes: FAILED (evicted))" in (
        status.stdout
    ), status.stdout

    # one pod per attempt (no duplicate), each told its attempt and the checkpoint
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns).items
    envs = sorted((_env(p)["TETHER_ATTEMPT"], _env(p)["TETHER_CHECKPOINT"]) for p in pods)
    assert envs == [("0", CHECKPOINT), ("1", CHECKPOINT)]
    assert len(client.BatchV1Api(kube_api).list_namespaced_job(ns).items) == 2
    OUTCOMES[request.node.name] = True
