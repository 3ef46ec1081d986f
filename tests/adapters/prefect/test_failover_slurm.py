"""A Prefect component task whose first scheduler, Slurm, refuses its job fails over.

A real refusal: on the session's Slurm cluster with accounting (``slurm_acct_cluster``), a
QOS that allows the user no job (``MaxSubmitJobsPerUser=0``, see
``tests/adapters/slurm_faults.py``); sbatch answers ``job submit limit``, tether raises a
``SlurmCapacityError`` and the task, ``scheduler=["slurm", "local_cwd"]`` with ``qos`` (an
option only slurm declares), runs its job on ``local_cwd`` under one logical handle, in
one task run, with no Slurm job left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.adapters.slurm_faults import qos_without_room
from tether.adapters.common import JobResult
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test"), pytest.mark.timeout(300)]


def test_qos_submit_limit_moves_the_task_to_the_next_scheduler(
    slurm_acct_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    qos = qos_without_room(slurm_acct_cluster)
    monkeypatch.setenv("SLURM_CONF", str(slurm_acct_cluster.conf))
    placed = component_task("tests.adapters.recovering_app:placed",
                            scheduler=["slurm", "local_cwd"],
                            cfg={"qos": qos, "job_dir": str(tmp_path / "jobs")})  # fmt: skip

    @flow
    def runs() -> JobResult:
        return placed(message="pf-moved")

    state = runs(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.app_handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(result.app_handle)
        lines = list(runner.log_lines(result.app_handle, "worker"))
    assert attempt["scheduler"] == "local_cwd" and attempt["state"] == "SUCCEEDED"
    [refusal] = attempt["refused"]
    assert refusal.startswith("slurm: ") and "job submit limit" in refusal, refusal
    assert lines == ["[tether] attempt 0 on local_cwd\n", "pf-moved attempt 0\n"], lines
    jobs = slurm_acct_cluster.run("squeue", "--noheader", "--states=all", "--format=%j").stdout
    assert "placed" not in jobs.split(), jobs  # Slurm holds no job of the task
