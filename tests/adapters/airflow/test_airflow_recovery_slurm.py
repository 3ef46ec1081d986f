"""An Airflow task recovers its job from a real Slurm node failure (``dag.test()``).

The session's Slurm cluster (two slurmd nodes): attempt 0 saves a checkpoint and runs until
the test sets its node DOWN (``scontrol update state=DOWN``; Slurm ends the job
``NODE_FAIL``, see ``tests/adapters/slurm_faults.py``). The task is the follower, in both
modes (deferred: its trigger follows the logical job): it reads the cause (``node_lost``),
submits attempt 1 on the other node under the same logical handle, and succeeds on its one
try, with no Airflow retry and no duplicate Slurm job. The module fills the Airflow cell of
the matrix's recovery rows (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, try_numbers, xcoms

from tests.adapters.slurm_faults import NodeDownUnder, check_recovered
from tests.e2e.matrix.table import recovery_outcomes

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(400)]

OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("airflow", "slurm", OUTCOMES,
                      "a node set DOWN (`NODE_FAIL`) under a task's job, deferred or not")


@pytest.mark.parametrize("dag_id", ["tether_t_lost_slurm", "tether_t_lost_slurm_defer"])
def test_node_set_down_mid_run_is_recovered_in_one_try(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest, dag_id: str,
) -> None:  # fmt: skip
    OUTCOMES[request.node.name] = False
    caplog.set_level("INFO")
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    name = f"af-lost-{uuid.uuid4().hex[:6]}"
    ckpt = tmp_path / "ckpt"
    when = dt.datetime(2024, 9, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    conf = {"ckpt": str(ckpt), "name": name, "job_dir": str(tmp_path / "jobs")}
    with NodeDownUnder(slurm_cluster, name, ckpt) as down:
        dr = run_dag(dag_id, conf=conf, when=when)
        out = capfd.readouterr()
        text = out.out + out.err + caplog.text
        assert task_states(dr) == {"lost": "success"}, text[-4000:]
        assert try_numbers(dr) == {"lost": 1}  # no Airflow retry: tether recovered the job
        handle = xcoms(dag_id, dr.run_id, "lost")["app_handle"]
        check_recovered(slurm_cluster, down, handle)
    deferred = dag_id.endswith("_defer")
    assert ("deferring until tether job chain://" in text) == deferred
    assert "[tether] attempt 1 on slurm" in text and "resumed at step 5" in text, text[-4000:]
    OUTCOMES[request.node.name] = True
