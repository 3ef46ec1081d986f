"""The portability matrix's ``local_cwd`` and ``kubernetes`` columns.

One pipeline through every adapter (``tests/e2e/matrix/table.py``) on each backend; each
cell runs ``tests/e2e/matrix/cells.py`` in its own process and checks the pipeline's end
result: the second component's output, computed from the first one's. The module records
its cells and renders ``docs/portability.md`` (:func:`~tests.e2e.matrix.table.write_doc`).

``kubernetes`` runs on the session's real kube-apiserver, etcd and Job controller
(``tests/e2e/infra``), whose test kubelet runs each pod's command as a process of this
machine (no container runtime here). A backend whose infrastructure cannot start is written
as "not runnable here" with the reason. Other backends' columns: ``test_matrix_*.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import env_path, env_pythonpath, run_cell
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
    """KUBECONFIG and run options of a namespace served by a process-running test kubelet."""
    try:
        cluster = request.getfixturevalue("kube_cluster")
        api = request.getfixturevalue("kube_api")
    except pytest.skip.Exception as e:
        reason = f"the Kubernetes control plane cannot start: {e.msg}"
        for a in ADAPTERS:
            RESULTS[(a, "kubernetes")] = Cell("not runnable here", reason)
        raise
    from tests.e2e.infra.kube import create_namespace
    from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
    from tests.e2e.infra.kubelet_exec import PodExecutor

    ns = "matrix-" + hashlib.sha256(str(os.getpid()).encode()).hexdigest()[:8]
    create_namespace(api, ns)
    base = {k: os.environ[k] for k in ("HOME", "LANG", "TMPDIR") if k in os.environ}
    base.update(PATH=env_path(), PYTHONPATH=env_pythonpath())
    cwd = tmp_path_factory.mktemp("pods")
    with FakeKubelet(api, node_name="tether-matrix-node", namespace=ns,
                     behaviour=Behaviour.run_process(),
                     executor=PodExecutor(base_env=base, cwd=cwd)):  # fmt: skip
        yield {
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "MATRIX_CFG": json.dumps({"namespace": ns}),
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
