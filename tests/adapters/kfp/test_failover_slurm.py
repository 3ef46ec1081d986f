"""A KFP launcher step whose first scheduler, Slurm, refuses its job fails over (``kfp.local``).

A real refusal: on the session's Slurm cluster with accounting (``slurm_acct_cluster``), a
QOS that allows the user no job (``MaxSubmitJobsPerUser=0``, see
``tests/adapters/slurm_faults.py``); sbatch answers ``job submit limit``, tether raises a
``SlurmCapacityError`` and the step, ``scheduler=["slurm", "local_cwd"]`` with ``qos`` (an
option only slurm declares), runs its job on ``local_cwd`` under one logical handle, with
no Slurm job left behind.
"""

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kfp")

from tests.adapters.slurm_faults import qos_without_room
from tether.adapters.kfp import LauncherOptions, step
from tether.runner import get_runner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.filterwarnings(
    "ignore:.*is deprecated.*:DeprecationWarning", "ignore::FutureWarning")]


def test_qos_submit_limit_moves_the_step_to_the_next_scheduler(
    kfp_subprocess: Path, slurm_acct_cluster: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from kfp import dsl

    qos = qos_without_room(slurm_acct_cluster)
    monkeypatch.setenv("SLURM_CONF", str(slurm_acct_cluster.conf))
    placed = step("tests.adapters.recovering_app:placed", scheduler=["slurm", "local_cwd"],
                  cfg={"qos": qos, "job_dir": str(tmp_path / "jobs")},
                  launcher=LauncherOptions(wait_interval=0.2, cancel_grace=10.0))  # fmt: skip

    @dsl.pipeline(name="fails-over-slurm")
    def pipeline() -> None:
        placed(message="kf-moved")

    pipeline()
    log = capfd.readouterr().out
    assert "kf-moved attempt 0" in log and "finished SUCCEEDED" in log, log[-3000:]
    handle = log.split("[tether] launched ", 1)[1].split()[0]
    assert handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["state"] == "SUCCEEDED"
    [refusal] = attempt["refused"]
    assert refusal.startswith("slurm: ") and "job submit limit" in refusal, refusal
    jobs = slurm_acct_cluster.run("squeue", "--noheader", "--states=all", "--format=%j").stdout
    assert "placed" not in jobs.split(), jobs  # Slurm holds no job of the step
