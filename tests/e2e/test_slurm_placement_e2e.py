"""Failover after a placement timeout, from a real Slurm partition that is DOWN.

The test creates a partition of its own on the session's cluster (``scontrol create``) in
state ``DOWN``: Slurm accepts jobs there and keeps them ``PENDING`` (reason
``PartitionDown``), as it would behind a week-long queue. With
``RecoveryPolicy(placement_timeout_s=T)`` and the candidates ``["slurm", "local_cwd"]``, the
follower ``scancel``s the Slurm job once it was pending for ``T`` seconds, waits until Slurm
says it is CANCELLED, and submits the same attempt to ``local_cwd``. The partition is
deleted after the test (it holds no other test's jobs).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.runner import Runner
from tether.specs import AppDef, AppState, RecoveryPolicy, Role, parse_app_handle

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PLACEMENT_S = 3.0


@pytest.fixture
def down_partition(slurm_cluster: SlurmCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A partition over the cluster's nodes in state DOWN (deleted afterwards)."""
    name = "down" + hashlib.sha256(request.node.name.encode()).hexdigest()[:8]
    nodes = ",".join(slurm_cluster.nodes)
    slurm_cluster.run("scontrol", "create", f"PartitionName={name}", f"Nodes={nodes}",
                      "State=DOWN", "MaxTime=INFINITE")  # fmt: skip
    try:
        yield name
    finally:
        slurm_cluster.run("scontrol", "delete", f"PartitionName={name}", check=False)


@pytest.fixture
def runner(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner("e2e", scheduler_params={"slurm": {"slurm_conf": str(slurm_cluster.conf)}}) as r:
        yield r


def _state_and_reason(cluster: SlurmCluster, job_id: str) -> tuple[str, str]:
    out = cluster.run("squeue", "--noheader", "--states=all", "--jobs", job_id,
                      "--format=%T|%r").stdout.strip()  # fmt: skip
    state, _, reason = out.partition("|")
    return state, reason


def test_a_job_pending_on_a_down_partition_fails_over_to_local_cwd(
    runner: Runner, slurm_cluster: SlurmCluster, down_partition: str, tmp_path: Path
) -> None:
    role = Role("w", entrypoint=sys.executable,
                args=["-c", "import os; print('ran attempt', os.environ['TETHER_ATTEMPT'])"])
    app = AppDef("pending", roles=[role],
                 recovery=RecoveryPolicy(max_recoveries=0, placement_timeout_s=PLACEMENT_S))
    cfg = {"partition": down_partition, "job_dir": str(tmp_path / "jobs")}  # fmt: skip
    handle = runner.run(app, ["slurm", "local_cwd"], cfg, job_key=f"pl-{down_partition}")
    [first] = runner.attempts(handle)
    assert first["scheduler"] == "slurm" and first["handle"].startswith("slurm://")
    job_id = parse_app_handle(first["handle"]).app_id
    assert _state_and_reason(slurm_cluster, job_id) == ("PENDING", "PartitionDown")

    status = runner.wait(handle, wait_interval=0.5, timeout=180)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["withdrawn"] == [first["handle"]]
    [refusal] = attempt["refused"]
    assert refusal.startswith(f"slurm: not placed within {PLACEMENT_S:g}s"), refusal
    # Slurm's own word: cancelled while still pending, never given a node
    assert _state_and_reason(slurm_cluster, job_id)[0] == "CANCELLED"
    gone = runner.status(first["handle"])
    assert gone is not None and gone.state == AppState.CANCELLED
    assert list(runner.log_lines(handle, "w")) == [
        "[tether] attempt 0 on local_cwd\n", "ran attempt 0\n"]
