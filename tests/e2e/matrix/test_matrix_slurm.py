"""The portability matrix's ``slurm`` column, on the session's real Slurm cluster.

Each cell runs the two-component pipeline (``tests/e2e/matrix/cells.py``) in its own process
with ``SLURM_CONF`` pointing at the cluster of ``tests/e2e/infra/slurm.py`` (munged,
slurmctld and two slurmd "nodes" on this host): every component is a real batch job, and its
status, logs and outputs go through Slurm. The jobs run from a ``job_dir`` of the test and
publish to the default ``file://`` outputs root, which the nodes see because they are this
host. When the cluster cannot start, the column reads "not runnable here" with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import run_cell
from tests.e2e.matrix.table import ADAPTERS, Cell, write_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

BACKEND = "slurm"
RESULTS: dict[tuple[str, str], Cell] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_doc() -> Any:
    yield
    write_doc(RESULTS)


@pytest.fixture(scope="module")
def slurm_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """``SLURM_CONF`` of the session cluster (the column is "not runnable here" without it)."""
    try:
        cluster = request.getfixturevalue("slurm_cluster")
    except pytest.skip.Exception as e:
        for a in ADAPTERS:
            RESULTS[(a, BACKEND)] = Cell("not runnable here", f"Slurm cannot start: {e.msg}")
        raise
    return {"SLURM_CONF": str(cluster.conf)}


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_cell(
    adapter: str, slurm_env: dict[str, str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The pipeline through ``adapter`` on ``slurm`` publishes the expected result."""
    cfg = {"job_dir": str(tmp_path / "jobs")}
    backend_env = {"MATRIX_SCHEDULER": BACKEND, "MATRIX_CFG": json.dumps(cfg), **slurm_env}
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, BACKEND)] = cell
    assert cell.outcome == "pass", cell.reason
