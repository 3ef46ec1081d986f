"""The portability matrix's ``aws_batch`` column: moto's server, whose Batch jobs run as
real podman containers (``tests/e2e/infra/moto.py``).

The components run ``sys.executable``, which the busybox image lacks: the column's run
options mount this machine's ``/usr``, ``/lib``, ``/lib64``, the interpreter, the venv and
the checkout read-only into every container (``host_volumes``, Batch host volumes), and the
cell's directory read-write so the programs publish their outputs where ``Runner.outputs``
reads them. The components' image ``tether-matrix/python:1`` is the busybox image tagged
under ``localhost/`` (``image_repo=localhost``); nothing is pulled.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import run_cell
from tests.e2e.matrix.table import ADAPTERS, REPO, Cell, write_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

BACKEND = "aws_batch"
IMAGE = "tether-matrix/python:1"
RESULTS: dict[tuple[str, str], Cell] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_doc() -> Iterator[None]:
    yield
    write_doc(RESULTS)


@pytest.fixture(scope="module")
def aws_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """moto reset, a job queue, the component image, and the cells' AWS environment."""
    try:
        moto = request.getfixturevalue("aws_moto")
    except pytest.skip.Exception as e:
        for a in ADAPTERS:
            RESULTS[(a, BACKEND)] = Cell("not runnable here", f"moto + podman: {e.msg}")
        raise
    from tests.e2e.infra.moto import create_batch_queue

    moto.reset()
    create_batch_queue(moto.env())
    moto.podman._run("tag", moto.image, f"localhost/{IMAGE}")
    return moto.env()


def host_volumes(cell_dir: Path) -> str:
    paths = ["/usr", "/lib", "/lib64", sys.base_prefix, sys.prefix, str(REPO)]
    ro = [f"{os.path.realpath(p)}:{p}:ro" for p in dict.fromkeys(paths) if os.path.exists(p)]
    return ";".join([*ro, f"{cell_dir}:{cell_dir}"])


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_cell(adapter: str, aws_env: dict[str, str], request: pytest.FixtureRequest,
              tmp_path: Path) -> None:
    """The pipeline through ``adapter`` on ``aws_batch`` publishes the expected result."""
    from tests.e2e.infra.moto import QUEUE

    cfg = {"queue": QUEUE, "image_repo": "localhost", "host_volumes": host_volumes(tmp_path)}
    backend_env: dict[str, Any] = {"MATRIX_SCHEDULER": BACKEND, "MATRIX_CFG": json.dumps(cfg),
                                   **aws_env}  # fmt: skip
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, BACKEND)] = cell
    assert cell.outcome == "pass", cell.reason
