"""A KFP launcher step recovers its job from a real Slurm node failure (``kfp.local``).

The session's Slurm cluster (two slurmd nodes): attempt 0 saves a checkpoint and runs until
the test sets its node DOWN (``scontrol update state=DOWN``; Slurm ends the job
``NODE_FAIL``, see ``tests/adapters/slurm_faults.py``). The launcher is the follower: it
reads the cause (``node_lost``), submits attempt 1 on the other node under the same logical
handle, and the step finishes SUCCEEDED once, with no duplicate Slurm job. The module fills
the KFP cell of the matrix's recovery rows (``tests/e2e/matrix/table.py``).
"""

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kfp")

from tests.adapters.slurm_faults import NodeDownUnder, check_recovered
from tests.e2e.matrix.table import recovery_outcomes
from tether.adapters.kfp import LauncherOptions, step

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400), pytest.mark.filterwarnings(
    "ignore:.*is deprecated.*:DeprecationWarning", "ignore::FutureWarning")]

OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("kfp", "slurm", OUTCOMES,
                      "a node set DOWN (`NODE_FAIL`) under a launcher step's job")


def test_node_set_down_mid_run_is_recovered_in_one_step(
    kfp_subprocess: Path, slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    from kfp import dsl

    OUTCOMES[request.node.name] = False
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    name = f"kf-lost-{uuid.uuid4().hex[:6]}"
    ckpt = tmp_path / "ckpt"
    lost = step("tests.adapters.recovering_app:lost", scheduler="slurm",
                cfg={"job_dir": str(tmp_path / "jobs")},
                launcher=LauncherOptions(wait_interval=0.5, cancel_grace=30.0))  # fmt: skip

    @dsl.pipeline(name="recovers-node-loss")
    def pipeline() -> None:
        lost(ckpt=str(ckpt), name=name)

    with NodeDownUnder(slurm_cluster, name, ckpt) as down:
        pipeline()
        log = capfd.readouterr().out
        assert "finished SUCCEEDED" in log, log[-4000:]
        assert log.count("[tether] launched chain://") == 1, log[-4000:]
        handle = log.split("[tether] launched ", 1)[1].split()[0]
        check_recovered(slurm_cluster, down, handle)
    assert "[tether] attempt 1 on slurm" in log and "resumed at step 5" in log, log[-4000:]
    OUTCOMES[request.node.name] = True
