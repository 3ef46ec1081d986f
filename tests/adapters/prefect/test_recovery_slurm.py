"""A Prefect component task recovers its job from a real Slurm node failure.

The session's Slurm cluster (two slurmd nodes): attempt 0 saves a checkpoint and runs until
the test sets its node DOWN (``scontrol update state=DOWN``; Slurm ends the job
``NODE_FAIL``, see ``tests/adapters/slurm_faults.py``). The task run is the follower: it
reads the cause (``node_lost``), submits attempt 1 on the other node under the same logical
handle, and completes on its one run, with no Prefect retry and no duplicate Slurm job. The
module fills the Prefect cell of the matrix's recovery rows (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.slurm_faults import NodeDownUnder, check_recovered
from tests.e2e.matrix.table import recovery_outcomes

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test"), pytest.mark.timeout(400)]

OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    recovery_outcomes("prefect", "slurm", OUTCOMES,
                      "a node set DOWN (`NODE_FAIL`) under a `component_task`'s job")


def test_node_set_down_mid_run_is_recovered_in_one_task_run(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    from prefect import flow

    from tether.adapters.common import JobResult
    from tether.adapters.prefect import component_task
    from tether.specs import AppState

    OUTCOMES[request.node.name] = False
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    name = f"pf-lost-{uuid.uuid4().hex[:6]}"
    ckpt = tmp_path / "ckpt"
    lost = component_task("tests.adapters.recovering_app:lost", scheduler="slurm",
                          cfg={"job_dir": str(tmp_path / "jobs")})  # fmt: skip

    @flow
    def recovers() -> JobResult:
        return lost(ckpt=str(ckpt), name=name)

    with NodeDownUnder(slurm_cluster, name, ckpt) as down:
        state = recovers(return_state=True)
        assert state.is_completed(), state.message
        result = state.result()
        assert result.state == AppState.SUCCEEDED
        check_recovered(slurm_cluster, down, result.app_handle)
    OUTCOMES[request.node.name] = True
