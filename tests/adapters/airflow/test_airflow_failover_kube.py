"""An Airflow task whose first scheduler refuses its job for capacity fails over.

A real refusal: the e2e kube-apiserver's quota admission answers ``403 ... exceeded quota``
for a namespace whose ResourceQuota allows no Job (the session's control plane, no kubelet
needed: the Job is refused before it exists). The task, ``scheduler="kubernetes,local_cwd"``,
runs its job on ``local_cwd`` under one logical handle, in both modes (deferred: the trigger
follows the logical job).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, try_numbers, xcoms

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.test_kubernetes_failure_causes_e2e import _no_room_for_jobs
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(300)]


@pytest.fixture
def full_ns(kube_cluster: Any, kube_api: Any, request: pytest.FixtureRequest,
            monkeypatch: pytest.MonkeyPatch) -> str:  # fmt: skip
    """A namespace with no room for a Job; the task's runner reaches the cluster by
    ``$KUBECONFIG``."""
    name = "fo-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    _no_room_for_jobs(kube_api, name)
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    return name


@pytest.mark.parametrize("dag_id", ["tether_t_failover", "tether_t_failover_defer"])
def test_quota_refusal_moves_the_task_to_the_next_scheduler(
    kube_api: Any, full_ns: str, capfd: pytest.CaptureFixture[str], dag_id: str
) -> None:
    when = dt.datetime(2024, 8, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    dr = run_dag(dag_id, conf={"schedulers": "kubernetes,local_cwd", "namespace": full_ns},
                 when=when)
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"placed": "success"}, text[-4000:]
    assert try_numbers(dr) == {"placed": 1}  # no Airflow retry: tether moved the job
    handle = xcoms(dag_id, dr.run_id, "placed")["app_handle"]
    assert handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd"
    [refusal] = attempt["refused"]
    assert refusal.startswith("kubernetes: ")
    assert "ResourceQuota 'team-quota' has no room" in refusal
    assert "placed attempt 0" in text
    assert client.BatchV1Api(kube_api).list_namespaced_job(full_ns).items == []


@pytest.mark.parametrize("schedulers", ["kubernetes,local_cwd", "local_cwd,kubernetes"])
def test_secret_env_on_a_candidate_that_cannot_hold_it_fails_before_submitting(
    kube_api: Any, full_ns: str, capfd: pytest.CaptureFixture[str], schedulers: str
) -> None:
    """``secret_env`` goes to every candidate (the job may run on any of them), each as its
    own secret: local_cwd holds none, so the task fails on its first try naming the
    candidate, before any job is submitted, and no Secret is left on kubernetes (stored
    there first, then deleted). The value is never printed."""
    token = f"tok-{uuid.uuid4().hex}"
    when = dt.datetime(2024, 12, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    dr = run_dag("tether_t_failover_secret", when=when,
                 conf={"schedulers": schedulers, "namespace": full_ns, "token": token})
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"with_secret": "failed"}, text[-4000:]
    assert try_numbers(dr) == {"with_secret": 1}  # no retry can help
    assert (f"task 'with_secret': secret_env: the local_cwd scheduler cannot hold secrets for "
            f"a job; give the job a SecretRef to a secret the backend already has (candidate "
            f"'local_cwd' of {schedulers.replace(',', ', ')}: the job may run on any "
            "candidate, so each must hold the secret") in text, text[-4000:]
    assert token not in text
    assert "app_handle" not in xcoms("tether_t_failover_secret", dr.run_id, "with_secret")
    secrets = client.CoreV1Api(kube_api).list_namespaced_secret(full_ns).items
    assert [x.metadata.name for x in secrets if x.type == "Opaque"] == []
    assert client.BatchV1Api(kube_api).list_namespaced_job(full_ns).items == []
    with get_runner() as runner:
        assert [a for a in runner.list("local_cwd") if a.app_id.startswith("placed")] == []
