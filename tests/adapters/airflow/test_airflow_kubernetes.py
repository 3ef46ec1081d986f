"""The operator on a real kube-apiserver (tests/e2e/infra): connections, secrets, cleanup.

The control plane is the e2e one (etcd + kube-apiserver + kube-controller-manager built by
``tests/e2e/infra/build_kube.sh``, cached outside the repository); a test kubelet binds the
pods and runs them to success. Skipped, with the reason, when the binaries are not built.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, xcoms

pytest.importorskip("kubernetes")

from kubernetes import client

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(300)]

SUITE = "airflow-k8s"
PASSWORD = "s3cr3t-" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.e2e.infra.kube import SKIP_REASON, KubeCluster, ensure_binaries

    binaries = ensure_binaries()
    if binaries is None:
        pytest.skip(SKIP_REASON)
    with KubeCluster(binaries, insecure_kubeconfig=False) as kc:
        yield kc


@pytest.fixture(scope="module")
def api(cluster: Any) -> Iterator[Any]:
    with cluster.api_client() as a:
        yield a


class SecretSeen:
    """What the pods saw: the Secret their env refers to, read while they ran."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.values: dict[str, str] = {}
        self.lock = threading.Lock()

    def policy(self, pod: Any) -> Any:
        from tests.e2e.infra.kubelet import Behaviour

        for e in pod.spec.containers[0].env or []:
            ref = e.value_from.secret_key_ref if e.value_from else None
            if ref is not None:
                secret = client.CoreV1Api(self.api).read_namespaced_secret(
                    ref.name, pod.metadata.namespace)
                with self.lock:
                    self.values[e.name] = base64.b64decode(secret.data[ref.key]).decode()
        hold = (pod.metadata.labels or {}).get("e2e-hold") == "yes"
        return Behaviour.succeed(run_seconds=120.0 if hold else 0.3)


@pytest.fixture(scope="module")
def seen(api: Any) -> Iterator[SecretSeen]:
    from tests.e2e.infra.kubelet import FakeKubelet

    s = SecretSeen(api)
    with FakeKubelet(api, node_name="tether-airflow-node", label_selector=f"e2e-suite={SUITE}",
                     behaviour=s.policy):
        yield s


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
    api: Any, ns: str, seen: SecretSeen, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    when = dt.datetime(2024, 7, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    dr = run_dag("tether_t_k8s", conf={"namespace": ns}, when=when)
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"with_secret": "success", "deleted_after": "success"}, text[-4000:]

    # the pod got the value through secretKeyRef while it ran...
    assert seen.values.get("DB_PASSWORD") == PASSWORD
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
    api: Any, ns: str, seen: SecretSeen, cluster: Any
) -> None:
    import asyncio

    from tether.adapters.airflow.trigger import TetherJobTrigger
    from tether.runner import get_runner
    from tether.specs import AppDef, AppState, Role, SecretRef

    cfg = {"namespace": ns, "labels": {"e2e-suite": SUITE, "e2e-hold": "yes"}}
    role = Role("main", image="busybox:1.36", entrypoint="sleep", args=["120"],
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
