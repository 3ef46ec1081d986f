"""A KFP launcher step's job on a real kube-apiserver: it lands in the pipeline's namespace
with the step's settings (env, resources, node selector, tolerations).

The launcher's runtime (:func:`tether.adapters.kfp.launch.launch`) runs here as it runs in
the launcher pod: the pipeline's namespace comes from ``TETHER_KFP_NAMESPACE`` (what the
downward API sets in the pod). The cluster is the session's real single node
(``tests/e2e/infra/kube_node.py``): the step's pods run busybox containers, so the node must
match the step's node selector and the Secret its env refers to must exist, as on a real
cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")
pytest.importorskip("kfp")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_images import BUSYBOX_IMAGE
from tests.e2e.infra.kube_node_fixtures import RealKube
from tether.adapters.kfp.launch import StepIds, launch
from tether.adapters.kfp.spec import LaunchSpec
from tether.runner import Runner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

POOL = "tether.dev/e2e-pool"


@pytest.fixture
def kube_api(real_kube: RealKube) -> Iterator[Any]:
    """The real cluster's client; its node is labelled as the pool the step selects."""
    v1 = client.CoreV1Api(real_kube.api)
    v1.patch_node(real_kube.node.name, {"metadata": {"labels": {POOL: "a100"}}})
    try:
        yield real_kube.api
    finally:
        v1.patch_node(real_kube.node.name, {"metadata": {"labels": {POOL: None}}})


def test_job_lands_in_the_pipelines_namespace_with_the_steps_settings(
        kube_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = "kfp-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:10]
    create_namespace(kube_api, ns)
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="hf"), string_data={"token": "hf-123"}))
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TETHER_KFP_NAMESPACE", ns)  # the downward API, in the launcher pod
    spec = LaunchSpec(
        component="tests.adapters.kfp.components:pair", scheduler="kubernetes",
        cfg={"image_pull_policy": "Never"}, env={"WANDB_MODE": "offline"},
        inherit={"resource": {"cpu": 1.0, "memMB": 512},
                 "secrets": {"HF_TOKEN": ["hf", "token"]},
                 "node_selector": {POOL: "a100"},
                 "tolerations": ["nvidia.com/gpu:NoSchedule"]},
        wait_interval=0.5,
    )
    lines: list[str] = []
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
        result = launch(spec, {"msg": "hi", "image": BUSYBOX_IMAGE},
                        StepIds("run-1", "pair", "7", str(tmp_path)),
                        sink=lines.append, runner=runner)  # fmt: skip
    assert result.succeeded, lines
    assert result.app_handle.startswith(f"kubernetes://tether/{ns}:")
    assert "[tether] secrets by reference: HF_TOKEN=secret:hf/token" in lines

    app_id = result.app_handle.rsplit(":", 1)[1]
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(
        ns, label_selector=f"tether.dev/app-id={app_id}").items
    assert len(jobs) == 3  # server + 2 clients, all in the pipeline's namespace
    for job in jobs:
        pod = job.spec.template.spec
        assert pod.node_selector == {POOL: "a100"}
        assert [(t.key, t.operator, t.effect) for t in pod.tolerations] == [
            ("nvidia.com/gpu", "Exists", "NoSchedule")]
        container = pod.containers[0]
        assert container.resources.limits["cpu"] == "1"
        assert container.resources.limits["memory"] == "512Mi"
        env = {e.name: e.value for e in container.env}
        assert env["WANDB_MODE"] == "offline"
        # the job's outputs go under the pipeline root, not the launcher pod's disk
        assert env["TETHER_OUTPUTS_URL"].startswith(f"{tmp_path}/tether-outputs/kubernetes/")
    assert not client.BatchV1Api(kube_api).list_namespaced_job(
        "default", label_selector=f"tether.dev/app-id={app_id}").items
