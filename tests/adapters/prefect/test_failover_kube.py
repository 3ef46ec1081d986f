"""A Prefect component task whose first scheduler refuses its job for capacity fails over.

A real refusal: the e2e kube-apiserver's quota admission answers ``403 ... exceeded quota``
for a namespace whose ResourceQuota allows no Job (the session's control plane; no kubelet
needed, the Job is refused before it exists). The task, ``scheduler=["kubernetes",
"local_cwd"]``, runs its job on ``local_cwd`` under one logical handle, in one task run.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.test_kubernetes_failure_causes_e2e import _no_room_for_jobs
from tether.adapters.common import JobResult
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test"), pytest.mark.timeout(300)]


def test_quota_refusal_moves_the_task_to_the_next_scheduler(
    kube_cluster: Any, kube_api: Any, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    ns = "pf-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, ns)
    _no_room_for_jobs(kube_api, ns)
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    placed = component_task("tests.adapters.recovering_app:placed",
                            scheduler=["kubernetes", "local_cwd"], cfg={"namespace": ns})

    @flow
    def runs() -> JobResult:
        return placed()

    state = runs(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.app_handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(result.app_handle)
    assert attempt["scheduler"] == "local_cwd"
    [refusal] = attempt["refused"]
    assert refusal.startswith("kubernetes: ")
    assert "ResourceQuota 'team-quota' has no room" in refusal
    assert client.BatchV1Api(kube_api).list_namespaced_job(ns).items == []
