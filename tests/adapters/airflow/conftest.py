"""Real Airflow 3 for the adapter tests: a private AIRFLOW_HOME on sqlite, migrated once.

Airflow reads its configuration when it is first imported, so this module sets the
environment before anything imports ``airflow``: a temporary AIRFLOW_HOME, no example DAGs,
and a DAGs folder holding the test DAG file and the example DAGs of ``dags/`` (``dag.test()``
only runs DAGs it finds there). The session fixture runs ``airflow db migrate``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent

if "airflow" in sys.modules:  # pragma: no cover - a guard, not a code path
    raise RuntimeError(
        "airflow was imported before tests/adapters/airflow/conftest.py could point "
        "AIRFLOW_HOME at a temporary directory; import airflow only inside these tests"
    )

_BASE = Path(tempfile.mkdtemp(prefix="tether-airflow-tests-"))
atexit.register(shutil.rmtree, _BASE, ignore_errors=True)
AIRFLOW_HOME = _BASE / "airflow"
DAGS_FOLDER = _BASE / "dags"
DAGS_FOLDER.mkdir(parents=True)
for src in [HERE / "dags" / "tether_test_dags.py", HERE / "docker_dags" / "tether_docker_dags.py",
            *sorted((REPO / "dags").glob("*.py"))]:
    (DAGS_FOLDER / src.name).symlink_to(src)

os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """Migrates the sqlite metadata database of the private AIRFLOW_HOME (once).

    Returns:
        The AIRFLOW_HOME.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True, text=True, timeout=180, env=dict(os.environ),
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout}\n{proc.stderr}"
    yield AIRFLOW_HOME


@pytest.fixture(autouse=True)
def _job_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Jobs find this venv's ``python`` and tether, and read no user ``.tetherconfig``."""
    venv_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", venv_bin + os.pathsep + os.environ.get("PATH", ""))
    empty = tmp_path / "empty.tetherconfig"
    empty.write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(empty))
    for var in ("TETHER_TRACKERS", "TETHER_PARENT_RUN_ID", "TETHER_OUTPUTS_ROOT"):
        monkeypatch.delenv(var, raising=False)
