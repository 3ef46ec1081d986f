"""The operator on a real single-node cluster (tests/e2e/infra): connections, secrets, cleanup.

The cluster is the session's real one (``real_kube``: kube-apiserver, controller-manager,
scheduler, a kubelet with containerd, ``tests/e2e/infra/kube_node.py``); the jobs are busybox
containers. Skipped, with the reason, when the node cannot run here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, xcoms

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube_images import BUSYBOX_IMAGE

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(300)]

PASSWORD = "s3cr3t-" + uuid.uuid4().hex[:12]


@pytest.fixture
def cluster(real_kube: Any) -> Any:
    return real_kube.cluster


@pytest.fixture
def api(real_kube: Any) -> Any:
    return real_kube.api


@pytest.fixture
def ns(api: Any, cluster: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    from tests.e2e.infra.kube import create_namespace

    name = "af-" + uuid.uuid4().hex[:8]
    create_namespace(api, name)
    conn = {"conn_type": "tether_kubernetes",
            "extra": {"kubeconfig": str(cluster.kubeconfig_path), "namespace": name}}
    monkeypatch.setenv("AIRFLOW_CONN_TETHER_K8S_E2E", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_VAR_TETHER_DB_PASSWORD", PASSWORD)
    return name


def test_secret_env_reaches_the_pod_by_reference_only_and_is_cleaned_up(
    api: Any, ns: str, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    when = dt.datetime(2024, 7, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    # the container fails unless its $DB_PASSWORD hashes to the Variable's value's hash
    conf = {"namespace": ns, "image": BUSYBOX_IMAGE, "pull_policy": "Never",
            "password_sha256": hashlib.sha256(PASSWORD.encode()).hexdigest()}
    dr = run_dag("tether_t_k8s", conf=conf, when=when)
    text = "".join(capfd.readouterr())
    # the pod got the value through secretKeyRef while it ran...
    assert task_states(dr) == {"with_secret": "success", "deleted_after": "success"}, text[-4000:]
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    handle = xcoms("tether_t_k8s", dr.run_id, "with_secret")["app_handle"]
    name = handle.rsplit(":", 1)[-1]
    jobs = batch.list_namespaced_job(ns, label_selector=f"tether.dev/app-id={name}").items
    assert len(jobs) == 1
    env = {e.name: e for e in jobs[0].spec.template.spec.containers[0].env}
    ref = env["DB_PASSWORD"].value_from.secret_key_ref
    assert env["DB_PASSWORD"].value is None and ref.key == "DB_PASSWORD"
    assert env["PLAIN"].value == "visible"
    # ... the Job spec and the task log never hold it, and the Secret is gone after the task
    assert PASSWORD not in json.dumps(api.sanitize_for_serialization(jobs[0]))
    assert PASSWORD not in text
    assert core.list_namespaced_secret(ns, field_selector=f"metadata.name={ref.name}").items == []

    # the job is labelled with its task instance
    labels = jobs[0].metadata.labels
    assert labels["airflow-dag-id"] == "tether_t_k8s"
    assert labels["airflow-task-id"] == "with_secret"
    assert labels["airflow-try-number"] == "1"
    assert jobs[0].metadata.annotations["tether.dev/airflow-run-id"] == dr.run_id

    # the task's link points at the job's dashboard page
    assert xcoms("tether_t_k8s", dr.run_id, "with_secret")["ui_url"] == (
        f"https://dash.example/#/job/{ns}/{name}")

    # on_finish_action="delete": nothing of the second task's job is left
    gone = xcoms("tether_t_k8s", dr.run_id, "deleted_after")["app_handle"].rsplit(":", 1)[-1]
    assert batch.list_namespaced_job(ns, label_selector=f"tether.dev/app-id={gone}").items == []


def test_killing_a_deferred_task_cancels_its_job_and_deletes_its_secret(
    api: Any, ns: str, cluster: Any
) -> None:
    import asyncio

    from tether.adapters.airflow.trigger import TetherJobTrigger
    from tether.runner import get_runner
    from tether.specs import AppDef, AppState, Role, SecretRef

    cfg = {"namespace": ns, "image_pull_policy": "Never"}
    role = Role("main", image=BUSYBOX_IMAGE, entrypoint="sh",
                args=["-c", "trap 'exit 143' TERM; sleep 120 & wait"],
                secrets={"DB_PASSWORD": SecretRef("tether-kill-test", "DB_PASSWORD")})
    with get_runner(kubeconfig=str(cluster.kubeconfig_path)) as runner:
        runner.put_secret("kubernetes", "tether-kill-test", {"DB_PASSWORD": PASSWORD}, cfg)
        handle = runner.run(AppDef("held", [role]), "kubernetes", cfg)

    class MarkedFailed(TetherJobTrigger):
        def _ti_state(self) -> str | None:  # what Airflow reports after "mark failed"
            return "failed"

    trigger = MarkedFailed(
        app_handle=handle, poll_interval=0.2, dag_id="d", run_id="r", task_id="t",
        conn_id="tether_k8s_e2e",  # read from $AIRFLOW_CONN_TETHER_K8S_E2E (see `ns`)
        secret={"scheduler": "kubernetes", "name": "tether-kill-test", "cfg": cfg},
    )
    asyncio.run(trigger.on_kill())
    with get_runner(kubeconfig=str(cluster.kubeconfig_path)) as runner:
        status = runner.wait(handle, wait_interval=0.2, timeout=60)
    assert status is not None and status.state == AppState.CANCELLED
    secrets = client.CoreV1Api(api).list_namespaced_secret(
        ns, field_selector="metadata.name=tether-kill-test").items
    assert secrets == []
