"""A KFP launcher step recovers its job from a Kubernetes pod eviction (``kfp.local``).

On the session's e2e kube-apiserver, with a test kubelet (``tests/adapters/kube_faults.py``):
attempt 0's pod runs until evicted the way a kubelet under node pressure evicts it (pod
``Evicted``, ``DisruptionTarget``); the Job controller fails its Job. The launcher is the
follower: it reads the cause (``evicted``), submits attempt 1 under the same logical handle,
and the step finishes SUCCEEDED once, with one Job and one pod per attempt. (``cfg`` makes
it a launcher step; the native steps are KFP's own pods, recovered by nothing of tether's.)
The module fills the KFP cell of the matrix's kubernetes recovery column
(``tests/e2e/matrix/table.py``).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kfp")
pytest.importorskip("kubernetes")

from tests.adapters.kube_faults import EvictUnder, adapter_kubelet, check_recovered, namespace
from tests.e2e.matrix.table import recovery_outcomes
from tether.adapters.kfp import LauncherOptions, step

# The test kubelet, not the real node: the eviction comes at a chosen moment, which a real
# kubelet does only under real node pressure.
pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(400),
    pytest.mark.fake_kubelet("an eviction at a chosen moment, with its DisruptionTarget"),
    pytest.mark.filterwarnings("ignore:.*is deprecated.*:DeprecationWarning",
                               "ignore::FutureWarning"),
]

SUITE = "kfp-recovery"
CHECKPOINT = "s3://bucket/runs/kf-evicted"
OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("kfp", "kubernetes", OUTCOMES,
                      "a pod evicted (`DisruptionTarget`) under a launcher step's job; test "
                      "kubelet")


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[Any]:
    with adapter_kubelet(kube_api, SUITE) as kl:
        yield kl


def test_evicted_pod_is_recovered_in_one_step(
    kfp_subprocess: Path, kube_cluster: Any, kube_api: Any, kubelet: Any,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    from kfp import dsl

    OUTCOMES[request.node.name] = False
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig_path))
    ns = namespace(kube_api, request.node.name)
    evictable = step("tests.adapters.recovering_app:evictable", scheduler="kubernetes",
                     cfg={"namespace": ns, "labels": f"e2e-suite:{SUITE}"},
                     launcher=LauncherOptions(wait_interval=0.5, cancel_grace=30.0))  # fmt: skip
    assert evictable.plan(ckpt=CHECKPOINT).mode == "launcher"

    @dsl.pipeline(name="recovers-eviction")
    def pipeline() -> None:
        evictable(ckpt=CHECKPOINT, name="kf-evictme")

    with EvictUnder(kube_api, kubelet, ns) as evict:
        pipeline()
    log = capfd.readouterr().out
    assert "finished SUCCEEDED" in log, log[-4000:]
    assert log.count("[tether] launched chain://") == 1, log[-4000:]
    handle = log.split("[tether] launched ", 1)[1].split()[0]
    check_recovered(kube_api, evict, handle, CHECKPOINT)
    assert "[tether] attempt 1 on kubernetes" in log, log[-4000:]
    OUTCOMES[request.node.name] = True
