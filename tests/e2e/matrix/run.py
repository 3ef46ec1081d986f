"""Runs one matrix cell in its own process (Airflow, Prefect and KFP each configure
themselves once per process) and judges its end result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.matrix.components import EXPECTED
from tests.e2e.matrix.table import REPO, Cell

CELL_TIMEOUT_S = 840


def env_path() -> str:
    """``PATH`` with this interpreter's ``bin`` first."""
    return str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", os.defpath)


def env_pythonpath() -> str:
    """``PYTHONPATH`` that finds this checkout's packages and tests."""
    parts = [str(REPO), str(REPO / "core"), str(REPO / "adapters")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def run_cell(adapter: str, backend_env: dict[str, str], workdir: Path) -> Cell:
    """Runs one cell in its own process.

    Args:
        adapter: A key of :data:`tests.e2e.matrix.table.ADAPTERS`.
        backend_env: ``MATRIX_SCHEDULER``, ``MATRIX_CFG`` and what the backend needs.
        workdir: Scratch directory.

    Returns:
        Its outcome.
    """
    empty = workdir / "empty.tetherconfig"
    empty.write_text("")
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("TETHER_", "PREFECT_", "AIRFLOW_", "KUBECONFIG"))
    }  # fmt: skip
    env.update(
        PATH=env_path(), PYTHONPATH=env_pythonpath(), TETHERCONFIG=str(empty),
        TETHER_STATE_DIR=str(workdir / "state"), **backend_env,
    )  # fmt: skip
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.e2e.matrix.cells", adapter, "--workdir",
             str(workdir / "cell")],
            cwd=workdir, env=env, capture_output=True, text=True, timeout=CELL_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Cell("fail", f"did not finish in {CELL_TIMEOUT_S} s")
    out = proc.stdout.splitlines()
    results = [line[len("RESULT ") :] for line in out if line.startswith("RESULT ")]
    if proc.returncode == 0 and results:
        shout = json.loads(results[-1])["shout"]
        if shout == EXPECTED:
            return Cell("pass")
        return Cell("fail", f"consume published {shout!r}, expected {EXPECTED!r}")
    errors = [line[len("ERROR ") :] for line in out if line.startswith("ERROR ")]
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    print(tail)
    return Cell("fail", errors[-1] if errors else f"exit status {proc.returncode}")
