"""An Airflow plugin of the Airflow end-to-end tests (tests/e2e/test_airflow_scheduler_e2e.py):
it holds the scheduler at the instant it has decided that a DAG run succeeded and has not yet
written that down, so a test can act inside that window (it opens only for the runs a test
asks for, and closes at once otherwise).

The scheduler's ``DagRun.update_state`` reads the run's task instances, sets the run's state
in memory, calls the ``on_dag_run_success`` listeners, then flushes and commits. This listener
waits there when the file ``$TETHER_E2E_HOLD_DIR/<run_id>.hold`` exists: it creates
``<run_id>.held`` and returns once the test creates ``<run_id>.go`` (or after
``HOLD_LIMIT_S``, so a failed test never stalls the scheduler for good).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

HOLD_LIMIT_S = 300.0


class HoldRunSuccess:
    """The listener: holds the scheduler in a run's success when a test asked for it."""

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        """Waits for the test's go-ahead when ``<run_id>.hold`` exists."""
        folder = os.environ.get("TETHER_E2E_HOLD_DIR")
        if not folder:
            return
        run_id = str(dag_run.run_id)
        if not (Path(folder) / f"{run_id}.hold").exists():
            return
        (Path(folder) / f"{run_id}.held").write_text(f"pid {os.getpid()}\n")
        go = Path(folder) / f"{run_id}.go"
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class TetherE2EHoldPlugin(AirflowPlugin):
    """Registers :class:`HoldRunSuccess`."""

    name = "tether_e2e_hold"
    listeners = [HoldRunSuccess()]
