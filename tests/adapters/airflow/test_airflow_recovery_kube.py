"""An Airflow task recovers its job from a Kubernetes pod eviction (``dag.test()``).

On the session's e2e kube-apiserver, with a test kubelet (``tests/adapters/kube_faults.py``):
attempt 0's pod runs until evicted the way a kubelet under node pressure evicts it (pod
``Evicted``, ``DisruptionTarget``); the Job controller fails its Job. The task is the
follower, in both modes (deferred: its trigger follows the logical job): it reads the cause
(``evicted``), submits attempt 1 under the same logical handle and succeeds on its one try,
with one Job and one pod per attempt. The module fills the Airflow cell of the matrix's
kubernetes recovery column (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, try_numbers, xcoms

pytest.importorskip("kubernetes")

from tests.adapters.kube_faults import EvictUnder, adapter_kubelet, check_recovered, namespace
from tests.e2e.matrix.table import recovery_outcomes

# The test kubelet, not the real node: the eviction comes at a chosen moment, which a real
# kubelet does only under real node pressure.
pytestmark = [
    pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(400),
    pytest.mark.fake_kubelet("an eviction at a chosen moment, with its DisruptionTarget"),
]

SUITE = "airflow-recovery"
CHECKPOINT = "s3://bucket/runs/af-evicted"
OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("airflow", "kubernetes", OUTCOMES,
                      "a pod evicted (`DisruptionTarget`) under a task's job, deferred or "
                      "not; test kubelet")


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[Any]:
    with adapter_kubelet(kube_api, SUITE) as kl:
        yield kl


@pytest.mark.parametrize("dag_id", ["tether_t_evicted_kube", "tether_t_evicted_kube_defer"])
def test_evicted_pod_is_recovered_in_one_try(
    kube_cluster: Any, kube_api: Any, kubelet: Any, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest, dag_id: str,
) -> None:  # fmt: skip
    OUTCOMES[request.node.name] = False
    caplog.set_level("INFO")
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    ns = namespace(kube_api, request.node.name)
    when = dt.datetime(2024, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    conf = {"ckpt": CHECKPOINT, "name": "af-evictme", "namespace": ns,
            "labels": f"e2e-suite:{SUITE}"}  # fmt: skip
    with EvictUnder(kube_api, kubelet, ns) as evict:
        dr = run_dag(dag_id, conf=conf, when=when)
    out = capfd.readouterr()
    text = out.out + out.err + caplog.text
    assert task_states(dr) == {"evictable": "success"}, text[-4000:]
    assert try_numbers(dr) == {"evictable": 1}  # no Airflow retry: tether recovered the job
    handle = xcoms(dag_id, dr.run_id, "evictable")["app_handle"]
    check_recovered(kube_api, evict, handle, CHECKPOINT)
    assert ("deferring until tether job chain://" in text) == dag_id.endswith("_defer")
    assert "[tether] attempt 1 on kubernetes" in text, text[-4000:]
    OUTCOMES[request.node.name] = True
