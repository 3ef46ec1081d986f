"""A ``dist.ddp`` training that checkpoints each epoch, interrupted twice on Kubernetes, ends
with the same final loss and weights as an uninterrupted run (issue 33).

On the session's real single-node cluster (containerd and a real kubelet, the tether image
lent this venv's torch as in ``test_kubernetes_real.py``). The app is the demo's
``examples/apps/train_ddp.py`` (through ``tests/e2e/ddp_paused.py``, whose attempts 0 and 1
wait after epochs 1 and 3 so that the test evicts them there, not before an epoch's
checkpoint is whole) with a checkpoint location on the node and a recovery policy. Each
interruption is a real one: the pod is evicted through the eviction API, the kubelet kills
its container, and tether (the Runner following the logical job) recovers the app as its next
attempt, which resumes from the checkpoint. The uninterrupted run is the same training on
``local_cwd``.

Kubernetes 1.20 (the cluster here) replaces an evicted pod of a Job at once; tether stops
that Job when it sees its pod deleted (``tether.schedulers.kubernetes.disruption``) and
submits the next attempt once none of the Job's pods runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_node_fixtures import RealKube
from tests.e2e.test_kubernetes_real import TRAIN_DDP, torch_for_the_image
from tether.schedulers.kubernetes.naming import ANN_POD
from tether.specs import AppState, RecoveryPolicy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PAUSED = Path(__file__).resolve().parent / "ddp_paused.py"
FINAL = re.compile(r"rank 0: done in [0-9.]+s, final loss ([0-9.]+)")


def _attempt(obj: Any) -> str:
    """``TETHER_ATTEMPT`` of a pod or of a Job's pod template."""
    spec = obj.spec.template.spec if isinstance(obj, client.V1Job) else obj.spec
    return {e.name: e.value for e in spec.containers[0].env or []}.get("TETHER_ATTEMPT", "")


def _until(what: str, probe: Callable[[], Any], timeout: float = 500) -> Any:
    """Polls ``probe`` until it returns something truthy (files and objects changing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _recorded_running_pod(api: Any, ns: str, attempt: str) -> str | None:
    """The attempt's pod once it runs and tether noted it as its Job's pod."""
    for job in client.BatchV1Api(api).list_namespaced_job(ns).items:
        value = (job.metadata.annotations or {}).get(ANN_POD, "")
        if _attempt(job) != attempt or "@" not in value:
            continue
        name = value.split("@")[0]
        for pod in client.CoreV1Api(api).list_namespaced_pod(ns).items:
            if (pod.metadata.name == name and pod.status.phase == "Running"
                    and pod.metadata.deletion_timestamp is None):  # fmt: skip
                return name
    return None


def _evict_paused_attempts(api: Any, ns: str, ckpt: Path, evicted: list[str]) -> None:
    """Evicts attempt 0's pod, then attempt 1's, each once it waits after its epoch."""
    for attempt in ("0", "1"):
        _until(f"attempt {attempt} to wait", (ckpt / f"paused-{attempt}").exists)
        pod = _until(f"attempt {attempt}'s pod", partial(_recorded_running_pod, api, ns, attempt))
        eviction = {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                    "metadata": {"name": pod, "namespace": ns}}  # fmt: skip
        client.CoreV1Api(api).create_namespaced_pod_eviction(pod, ns, eviction,
                                                              _preload_content=False)  # fmt: skip
        evicted.append(pod)


def test_ddp_evicted_twice_ends_as_an_uninterrupted_run(
    real_kube: RealKube, real_kube_tether_image: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    torch = pytest.importorskip("torch")
    from tests.e2e.infra.ports import free_port
    from tether.components.dist import ddp
    from tether.runner import Runner

    ns = "ddp-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]
    create_namespace(real_kube.api, ns)
    env, mounts = torch_for_the_image(tmp_path)
    on_kube, on_local, ckpt = tmp_path / "kube-model", tmp_path / "local-model", tmp_path / "ckpt"
    for d in (on_kube, ckpt):
        d.mkdir()
        d.chmod(0o777)
    mounts += [f"type=bind,src={on_kube},dst={on_kube}", f"type=bind,src={ckpt},dst={ckpt}",
               f"type=bind,src={PAUSED.parent},dst={PAUSED.parent},readonly"]  # fmt: skip
    job = dataclasses.replace(
        ddp("--model-dir", str(on_kube), script=str(PAUSED), j="1x2", cpu=0, memMB=0,
            image=real_kube_tether_image, env=env, mounts=mounts),
        checkpoint=str(ckpt), recovery=RecoveryPolicy(max_recoveries=3, backoff_s=0),
    )  # fmt: skip
    local = ddp("--model-dir", str(on_local), script=str(TRAIN_DDP), j="1x2", cpu=0, memMB=0,
                rdzv_port=free_port())  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(real_kube.cluster.kubeconfig_path))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    evicted: list[str] = []
    evictor = threading.Thread(target=_evict_paused_attempts,
                               args=(real_kube.api, ns, ckpt, evicted), daemon=True)  # fmt: skip
    with Runner() as runner:
        handle = runner.run(job, "kubernetes", {"namespace": ns, "image_pull_policy": "Never"})
        evictor.start()
        st = runner.wait(handle, wait_interval=0.5, timeout=800)
        kube_text = "".join(runner.log_lines(handle, "ddp_paused", 0))
        attempts = runner.attempts(handle)
        plain = runner.run(local, "local_cwd", {})
        local_st = runner.wait(plain, wait_interval=0.5, timeout=600)
        local_text = "".join(runner.log_lines(plain, "train_ddp", 0))
    evictor.join(timeout=30)
    assert local_st is not None and local_st.state == AppState.SUCCEEDED, local_text[-3000:]
    assert st is not None and st.state == AppState.SUCCEEDED, (st, kube_text[-4000:])
    assert len(evicted) == 2, evicted
    assert [(a["attempt"], a["state"], a["cause"]) for a in attempts] == [
        (0, "FAILED", "evicted"), (1, "FAILED", "evicted"), (2, "SUCCEEDED", None),
    ], attempts  # fmt: skip
    # each attempt went on from the last checkpoint (the evicted pods' logs went with them;
    # each waiting attempt noted the first and last epoch it trained). A pod the Job
    # controller put in an evicted one's place (Kubernetes < 1.26) may train an epoch, from
    # the same checkpoint, before tether stops it (and note its own epochs): the same
    # epoch, so the same weights.
    _, last0 = map(int, (ckpt / "paused-0").read_text().split())
    first1, last1 = map(int, (ckpt / "paused-1").read_text().split())
    assert last0 >= 1 and first1 > last0 - 1 and first1 >= 2 and last1 >= 3, (last0, first1)
    resumed = re.findall(r"rank 0: resuming after epoch (\d+)", kube_text)
    assert [int(e) for e in resumed] in ([3], [4]), kube_text[-4000:]
    (kube_final,) = FINAL.findall(kube_text)
    (local_final,) = FINAL.findall(local_text)
    assert abs(float(kube_final) - float(local_final)) < 2e-5, (kube_final, local_final)
    kube_weights = torch.load(on_kube / "model.pt")
    local_weights = torch.load(on_local / "model.pt")
    for name, value in kube_weights.items():
        assert torch.allclose(value, local_weights[name], atol=1e-5), (name, value)
