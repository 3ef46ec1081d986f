"""A Prefect component task recovers its job from a Kubernetes pod eviction.

On the session's e2e kube-apiserver, with a test kubelet (``tests/adapters/kube_faults.py``):
attempt 0's pod runs until evicted the way a kubelet under node pressure evicts it (pod
``Evicted``, ``DisruptionTarget``); the Job controller fails its Job. The task run is the
follower: it reads the cause (``evicted``), submits attempt 1 under the same logical handle
and completes on its one run, with one Job and one pod per attempt. The module fills the
Prefect cell of the matrix's kubernetes recovery column (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.adapters.kube_faults import EvictUnder, adapter_kubelet, check_recovered, namespace
from tests.e2e.matrix.table import recovery_outcomes

# The test kubelet, not the real node: the eviction comes at a chosen moment, which a real
# kubelet does only under real node pressure.
pytestmark = [
    pytest.mark.e2e, pytest.mark.usefixtures("prefect_test"), pytest.mark.timeout(400),
    pytest.mark.fake_kubelet("an eviction at a chosen moment, with its DisruptionTarget"),
]

SUITE = "prefect-recovery"
CHECKPOINT = "s3://bucket/runs/pf-evicted"
OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("prefect", "kubernetes", OUTCOMES,
                      "a pod evicted (`DisruptionTarget`) under a `component_task`'s job; "
                      "test kubelet")


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[Any]:
    with adapter_kubelet(kube_api, SUITE) as kl:
        yield kl


def test_evicted_pod_is_recovered_in_one_task_run(
    kube_cluster: Any, kube_api: Any, kubelet: Any, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    from prefect import flow

    from tether.adapters.common import JobResult
    from tether.adapters.prefect import component_task
    from tether.specs import AppState

    OUTCOMES[request.node.name] = False
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    ns = namespace(kube_api, request.node.name)
    task = component_task("tests.adapters.recovering_app:evictable", scheduler="kubernetes",
                          cfg={"namespace": ns, "labels": f"e2e-suite:{SUITE}"})  # fmt: skip

    @flow
    def recovers() -> JobResult:
        return task(ckpt=CHECKPOINT, name="pf-evictme")

    with EvictUnder(kube_api, kubelet, ns) as evict:
        state = recovers(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.state == AppState.SUCCEEDED
    check_recovered(kube_api, evict, result.app_handle, CHECKPOINT)
    OUTCOMES[request.node.name] = True
