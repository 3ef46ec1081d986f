"""The portability matrix's ``ray`` column, on the session's real local Ray head.

Every cell runs its two components as real Ray jobs through the Jobs API of the head that
``tests/e2e/infra/ray.py`` starts on 127.0.0.1 (tether's driver runs each replica as a Ray
task; the replicas are processes of this machine, so outputs go to the default ``file://``
root that the cell and the replicas share). When the head cannot start (``ray`` is not
installed), the column is written as "not runnable here" with the reason.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import run_cell
from tests.e2e.matrix.table import ADAPTERS, Cell, write_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

COLUMN = "ray"
RESULTS: dict[tuple[str, str], Cell] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_doc() -> Iterator[None]:
    yield
    write_doc(RESULTS)


@pytest.fixture(scope="module")
def ray_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The head's Jobs API address, and the interpreter tether's driver runs with."""
    try:
        head = request.getfixturevalue("ray_head")
    except pytest.skip.Exception as e:
        for a in ADAPTERS:
            RESULTS[(a, COLUMN)] = Cell("not runnable here", f"the Ray head cannot start: {e.msg}")
        raise
    return {"TETHER_RAY_ADDRESS": head.address,
            "MATRIX_CFG": json.dumps({"python": sys.executable})}  # fmt: skip


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_cell(adapter: str, request: pytest.FixtureRequest, tmp_path: Path,
              ray_env: dict[str, str]) -> None:  # fmt: skip
    """The pipeline through ``adapter`` on ``ray`` publishes the expected result."""
    backend_env: dict[str, Any] = {"MATRIX_SCHEDULER": COLUMN, **ray_env}
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, COLUMN)] = cell
    assert cell.outcome == "pass", cell.reason
