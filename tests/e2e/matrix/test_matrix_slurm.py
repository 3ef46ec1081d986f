"""The portability matrix's ``slurm`` column, on the session's real Slurm cluster.

Each cell runs the two-component pipeline (``tests/e2e/matrix/cells.py``) in its own process
with ``SLURM_CONF`` pointing at the cluster of ``tests/e2e/infra/slurm.py`` (munged,
slurmctld and two slurmd "nodes" on this host): every component is a real batch job, and its
status, logs and outputs go through Slurm. The jobs run from a ``job_dir`` of the test and
publish to the default ``file://`` outputs root, which the nodes see because they are this
host. When the cluster cannot start, the column reads "not runnable here" with the reason.

The ``slurm_ssh`` and ``slurm_rest`` columns run the same cells with the ``slurm`` scheduler
reaching the cluster over the ``ssh`` and ``rest`` transports (a private sshd and slurmrestd,
``tests/e2e/infra/slurm_remote.py``), configured by ``TETHER_SLURM_*`` variables as a worker
would be. Their jobs run as root (the venv's Python is root's alone here); the cell's
directory is declared shared with ``mount`` (the same path on both sides: the nodes are this
host), so outputs come back. Every adapter's cell runs over both: the KFP launcher steps
(``kfp.local.SubprocessRunner``) inherit the ``TETHER_SLURM_*`` variables as a KFP step's
container would get them from its pipeline's environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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


REMOTE_ADAPTERS = tuple(ADAPTERS)
"""The cells the remote transports run: all of them."""


@pytest.fixture(scope="module")
def root_sshd(slurm_env: dict[str, str]) -> Iterator[Any]:
    """An sshd for root by key, in front of the session cluster."""
    from tests.e2e.infra.slurm_remote import INSTALL_HINT, SshServer, missing_remote_tools

    missing = missing_remote_tools()
    if missing:
        for a in REMOTE_ADAPTERS:
            RESULTS[(a, "slurm_ssh")] = Cell("not runnable here", f"missing {missing}")
        pytest.skip(f"missing {', '.join(missing)}; {INSTALL_HINT}")
    with SshServer(user="root") as server:
        yield server


def remote_env(transport: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """``TETHER_SLURM_*`` variables that send the cell's jobs over ``transport``."""
    cluster = request.getfixturevalue("slurm_cluster")
    shared = {"TETHER_SLURM_TRANSPORT": transport, "TETHER_SLURM_MOUNT": f"{tmp_path}={tmp_path}"}
    if transport == "ssh":
        sshd = request.getfixturevalue("root_sshd")
        return {**shared, "TETHER_SLURM_HOST": "127.0.0.1", "TETHER_SLURM_PORT": str(sshd.port),
                "TETHER_SLURM_USER": "root", "TETHER_SLURM_IDENTITY_FILE": sshd.identity_file,
                "TETHER_SLURM_KNOWN_HOSTS": sshd.known_hosts,
                "TETHER_SLURM_SLURM_CONF": str(cluster.conf)}  # fmt: skip
    restd = request.getfixturevalue("slurm_restd")
    jwt = tmp_path / "slurm.jwt"
    fd = os.open(jwt, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(cluster.token("root"))
    return {**shared, "TETHER_SLURM_REST_URL": restd.url, "TETHER_SLURM_JWT_FILE": str(jwt)}


@pytest.mark.parametrize("transport", ["ssh", "rest"])
@pytest.mark.parametrize("adapter", REMOTE_ADAPTERS)
def test_remote_cell(
    adapter: str, transport: str, slurm_env: dict[str, str], request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The pipeline through ``adapter`` on ``slurm`` over ``transport`` publishes the result."""
    column = f"slurm_{transport}"
    jobs = tmp_path / "jobs"
    backend_env = {"MATRIX_SCHEDULER": BACKEND, "MATRIX_CFG": json.dumps({"job_dir": str(jobs)}),
                   **remote_env(transport, request, tmp_path)}  # fmt: skip
    if adapter == "prefect":
        backend_env.update(request.getfixturevalue("prefect_api_env"))
    cell = run_cell(adapter, backend_env, tmp_path)
    RESULTS[(adapter, column)] = cell
    assert cell.outcome == "pass", cell.reason
