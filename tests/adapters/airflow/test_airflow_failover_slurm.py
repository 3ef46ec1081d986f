"""An Airflow task whose first scheduler, Slurm, refuses its job fails over (``dag.test()``).

A real refusal: on the session's Slurm cluster with accounting (``slurm_acct_cluster``), a
QOS that allows the user no job (``MaxSubmitJobsPerUser=0``, see
``tests/adapters/slurm_faults.py``); sbatch answers ``job submit limit``, tether raises a
``SlurmCapacityError`` and the task, ``scheduler="slurm,local_cwd"`` with ``qos`` (an option
only slurm declares; the failover DAG's one option), runs its job on ``local_cwd`` under one
logical handle on its first try, in both modes (deferred: the trigger follows the logical
job), with no Slurm job left behind.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from airflow_testlib import run_dag, task_states, try_numbers, xcoms

from tests.adapters.slurm_faults import qos_without_room
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(300)]


@pytest.mark.parametrize("dag_id", ["tether_t_failover", "tether_t_failover_defer"])
def test_qos_submit_limit_moves_the_task_to_the_next_scheduler(
    slurm_acct_cluster: Any, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str], dag_id: str,
) -> None:  # fmt: skip
    qos = qos_without_room(slurm_acct_cluster)
    monkeypatch.setenv("SLURM_CONF", str(slurm_acct_cluster.conf))
    when = dt.datetime(2024, 10, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)
    conf = {"schedulers": "slurm,local_cwd", "option": "qos", "namespace": qos}
    dr = run_dag(dag_id, conf=conf, when=when)
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"placed": "success"}, text[-4000:]
    assert try_numbers(dr) == {"placed": 1}  # no Airflow retry: tether moved the job
    handle = xcoms(dag_id, dr.run_id, "placed")["app_handle"]
    assert handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["state"] == "SUCCEEDED"
    [refusal] = attempt["refused"]
    assert refusal.startswith("slurm: ") and "job submit limit" in refusal, refusal
    assert "placed attempt 0" in text
    jobs = slurm_acct_cluster.run("squeue", "--noheader", "--states=all", "--format=%j").stdout
    assert "placed" not in jobs.split(), jobs  # Slurm holds no job of the task
