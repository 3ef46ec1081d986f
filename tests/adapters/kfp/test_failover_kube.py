"""A KFP step whose first scheduler refuses its job for capacity fails over (``kfp.local``).

A real refusal: the e2e kube-apiserver's quota admission answers ``403 ... exceeded quota``
for a namespace whose ResourceQuota allows no Job (the session's control plane; no kubelet
needed, the Job is refused before it exists). The launcher step, ``scheduler=["kubernetes",
"local_cwd"]``, runs its job on ``local_cwd`` under one logical handle.
"""

import hashlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kfp")
pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.test_kubernetes_failure_causes_e2e import _no_room_for_jobs
from tether.adapters.kfp import LauncherOptions, step
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.filterwarnings(
    "ignore:.*is deprecated.*:DeprecationWarning", "ignore::FutureWarning")]


def test_quota_refusal_moves_the_step_to_the_next_scheduler(
    kfp_subprocess: Path, kube_cluster: Any, kube_api: Any, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    from kfp import dsl

    ns = "kf-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, ns)
    _no_room_for_jobs(kube_api, ns)
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    placed = step("tests.adapters.recovering_app:placed", scheduler=["kubernetes", "local_cwd"],
                  cfg={"namespace": ns},
                  launcher=LauncherOptions(wait_interval=0.2, cancel_grace=10.0))

    @dsl.pipeline(name="fails-over")
    def pipeline() -> None:
        placed()

    pipeline()
    log = capfd.readouterr().out
    assert "placed attempt 0" in log and "finished SUCCEEDED" in log, log[-3000:]
    handle = log.split("[tether] launched ", 1)[1].split()[0]
    assert handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd"
    [refusal] = attempt["refused"]
    assert refusal.startswith("kubernetes: ")
    assert "ResourceQuota 'team-quota' has no room" in refusal
    assert client.BatchV1Api(kube_api).list_namespaced_job(ns).items == []
