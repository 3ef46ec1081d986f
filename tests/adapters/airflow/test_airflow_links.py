"""The task's extra link works while its job runs (a real Ray head, a real Airflow worker).

Airflow 3 records an operator's extra links only when the task's process ends (or defers);
a task that follows its job in the worker records the job's UI URL as its link as soon as
the job has one. The DAG runs in a subprocess (``dag.test()``), the job on a real Ray head
(``tests/e2e/infra/ray.py``), whose dashboard is the job's UI.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow_testlib import HERE, run_id_for, xcoms

pytest.importorskip("ray.job_submission")

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]

DAG_ID = "tether_t_live_link"
LINK_XCOM = "_link_TetherJobLink"


def test_the_job_link_is_recorded_while_the_job_runs(ray_head: Any, tmp_path: Path) -> None:
    when = dt.datetime(2024, 8, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    run_id = run_id_for(when)
    gate = tmp_path / "gate"
    log = tmp_path / "worker.log"
    env = dict(os.environ, TETHER_RAY_ADDRESS=ray_head.address)
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "airflow_testlib.py"), DAG_ID,
         "--conf", json.dumps({"gate": str(gate)}), "--when", when.isoformat()],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
    )
    try:
        # the worker streams the job's lines only after it has recorded the job's start
        deadline = time.monotonic() + 600  # a hang guard: a loaded machine starts Ray slowly
        while time.monotonic() < deadline and worker.poll() is None:
            if "/0 job-is-waiting-for-its-gate" in log.read_text(errors="replace"):
                break
            time.sleep(0.5)
        live = xcoms(DAG_ID, run_id, "on_ray")
        # the job cannot end before the gate exists: the link was recorded while it ran
        assert live.get(LINK_XCOM) == ray_head.address, (live, log.read_text()[-3000:])
        assert "state" not in live  # the task had not finished
    finally:
        gate.touch()
        worker.wait(timeout=600)
    out = log.read_text()
    assert worker.returncode == 0 and '"on_ray": "success"' in out, out[-3000:]
    assert xcoms(DAG_ID, run_id, "on_ray")[LINK_XCOM] == ray_head.address
