"""The portability matrix's ``local_docker`` column: real containers of the tether image.

Each cell runs the pipeline (``tests/e2e/matrix/cells.py``) in its own process against the
session's private podman serving the Docker API (``DOCKER_HOST``), holding the tether image
built from this checkout (fixture ``tether_image``, ``tests/e2e/infra/tether_image.py``).
Both components run ``python3`` of the image; the outputs root (``TETHER_OUTPUTS_ROOT``) is
a directory bind-mounted into every container at the same path, so the adapters read the
outputs the containers published. Without podman or the image's Debian base the cells are
written as "not runnable here" with the reason.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.matrix.run import run_cell
from tests.e2e.matrix.table import ADAPTERS, Cell, write_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

BACKEND = "local_docker"
RESULTS: dict[tuple[str, str], Cell] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_doc() -> Iterator[None]:
    yield
    write_doc(RESULTS)


@pytest.fixture(scope="module")
def docker_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[dict[str, str]]:  # fmt: skip
    """DOCKER_HOST, the image and the shared outputs directory of the column.

    The column's apps are deleted afterwards (the session's podman serves later modules, and
    ``list`` describes every app it has).
    """
    try:
        built = request.getfixturevalue("tether_image")
    except pytest.skip.Exception as e:
        for a in ADAPTERS:
            RESULTS[(a, BACKEND)] = Cell("not runnable here", str(e.msg))
        raise
    from tether.schedulers.local_docker import create_scheduler

    shared = tmp_path_factory.mktemp("docker-shared")
    with contextlib.closing(create_scheduler("matrix", docker_host=built.docker_host)) as sched:
        before = {a.app_id for a in sched.list()}
    yield {
        "DOCKER_HOST": built.docker_host,
        "MATRIX_IMAGE": built.image,
        "MATRIX_PYTHON": "python3",
        "MATRIX_MOUNT": str(shared),
        "TETHER_OUTPUTS_ROOT": str(shared / "outputs"),
    }
    with contextlib.closing(create_scheduler("matrix", docker_host=built.docker_host)) as sched:
        for app in sched.list():
            desc = sched.describe(app.app_id)
            # podman instances share network definitions: only apps with containers here
            if app.app_id not in before and desc is not None and desc.roles_statuses:
                sched.delete(app.app_id)


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_cell(adapter: str, request: pytest.FixtureRequest, docker_env: dict[str, str],
              tmp_path: Path) -> None:  # fmt: skip
    """The pipeline through ``adapter`` on ``local_docker`` publishes the expected result."""
    backend_env: dict[str, Any] = {"MATRIX_SCHEDULER": BACKEND, "MATRIX_CFG": json.dumps({}),
                                   **docker_env}
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, BACKEND)] = cell
    assert cell.outcome == "pass", cell.reason
