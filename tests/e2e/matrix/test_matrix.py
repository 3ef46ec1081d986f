"""The portability matrix's ``local_cwd`` and ``kubernetes`` columns.

One pipeline through every adapter (``tests/e2e/matrix/table.py``) on each backend; each
cell runs ``tests/e2e/matrix/cells.py`` in its own process and checks the pipeline's end
result: the second component's output, computed from the first one's. The module records
its cells and renders ``docs/portability.md`` (:func:`~tests.e2e.matrix.table.write_doc`).

``kubernetes`` runs on the session's real single-node cluster
(``tests/e2e/infra/kube_node.py``: kube-apiserver, etcd, controller-manager, scheduler, a
kubelet with containerd): each component is a real container of the tether image. A backend
whose infrastructure cannot start is written as "not runnable here" with the reason. Other
backends' columns: ``test_matrix_*.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import run_cell
from tests.e2e.matrix.table import ADAPTERS, Cell, write_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

COLUMNS = ["local_cwd", "kubernetes"]
RESULTS: dict[tuple[str, str], Cell] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_doc() -> Iterator[None]:
    yield
    write_doc(RESULTS)


@pytest.fixture(scope="module")
def kube_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, str]]:  # fmt: skip
    """KUBECONFIG, the image and run options of a namespace on the session's real node.

    Pods run ``python3`` of the tether image under the real kubelet; a directory of this
    machine is mounted (``hostPath``: the node is this host) at the same path, holding the
    outputs root, so ``Runner.outputs`` reads what the containers published.
    """
    try:
        real = request.getfixturevalue("real_kube")
        image = request.getfixturevalue("real_kube_tether_image")
    except pytest.skip.Exception as e:
        reason = f"the real Kubernetes node cannot start: {e.msg}"
        for a in ADAPTERS:
            RESULTS[(a, "kubernetes")] = Cell("not runnable here", reason)
        raise
    from tests.e2e.infra.kube import create_namespace

    ns = "matrix-" + hashlib.sha256(str(os.getpid()).encode()).hexdigest()[:8]
    create_namespace(real.api, ns)
    shared = tmp_path_factory.mktemp("kube-shared")
    shared.chmod(0o777)
    yield {
        "KUBECONFIG": str(real.cluster.kubeconfig_path),
        "MATRIX_CFG": json.dumps({"namespace": ns, "image_pull_policy": "Never"}),
        "MATRIX_IMAGE": image,
        "MATRIX_PYTHON": "python3",
        "MATRIX_MOUNT": str(shared),
        "TETHER_OUTPUTS_ROOT": str(shared / "outputs"),
    }


@pytest.mark.parametrize("backend", COLUMNS)
@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_cell(adapter: str, backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The pipeline through ``adapter`` on ``backend`` publishes the expected result."""
    backend_env: dict[str, Any] = {"MATRIX_SCHEDULER": backend, "MATRIX_CFG": "{}"}
    if backend == "kubernetes":
        backend_env.update(request.getfixturevalue("kube_env"))
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, backend)] = cell
    assert cell.outcome == "pass", cell.reason
