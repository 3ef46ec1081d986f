"""The demo's DDP training (``examples/apps/train_ddp.py``: two ranks through torchrun, gloo)
on Slurm, checkpointing each epoch to ``$TETHER_CHECKPOINT``, interrupted twice by real
infrastructure failures and recovered, ends with the same final loss as a run never
interrupted (issue 33).

The cluster is the module's own (``tests/e2e/slurm_recovery.py``). Attempts 0 and 1 run
``tests/e2e/ddp_held.py`` (the same training, which waits after epoch 1 in attempt 0 and after
epoch 3 in attempt 1, once that epoch's checkpoint is saved, so the failures come at known
points): the test sets attempt 0's node DOWN (Slurm ends it ``NODE_FAIL``) and preempts
attempt 1 with a job of the urgent partition (``PREEMPTED``). A follower (``Runner.wait`` in
another thread) records each cause and submits the next attempt, which resumes from the last
checkpoint; attempt 2 trains the last epoch and ends.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import slurm_recovery as rec
from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.slurm import SlurmCluster
from tether.components.dist import ddp
from tether.runner import Runner
from tether.specs import (
    AppDef,
    AppState,
    AppStatus,
    FailureCause,
    RecoveryPolicy,
    parse_app_handle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
EPOCHS = ["--epochs", "5", "--samples", "256"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    yield from rec.own_cluster()


@pytest.fixture
def runner_factory(cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                   ) -> Callable[[], Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    params = {"slurm": {"slurm_conf": str(cluster.conf)}}
    return lambda: Runner("e2e", scheduler_params=params)


def _ddp(script: str) -> AppDef:
    # torchrun's `python` must be this interpreter (the one with torch); one node, both ranks
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return ddp(*EPOCHS, script=script, j="1x2", cpu=2, memMB=1900,
               rdzv_port=free_ports(1)[0], env={"PATH": path})  # fmt: skip


def test_ddp_interrupted_twice_on_slurm_ends_like_an_uninterrupted_run(
    cluster: SlurmCluster, runner_factory: Callable[[], Runner], tmp_path: Path
) -> None:
    cfg = {"job_dir": str(tmp_path / "jobs")}
    with runner_factory() as runner:
        plain = runner.run(_ddp(str(REPO / "examples" / "apps" / "train_ddp.py")), "slurm", cfg)
        done = runner.wait(plain, wait_interval=0.5, timeout=rec.WAIT_S * 2)
        assert done is not None and done.state == AppState.SUCCEEDED, done
        expected = runner.outputs(plain)["final_loss"]

    ckpt = tmp_path / "ckpt"
    app = dataclasses.replace(
        _ddp(str(REPO / "tests" / "e2e" / "ddp_held.py")), checkpoint=str(ckpt),
        recovery=RecoveryPolicy(
            on=(FailureCause.NODE_LOST, FailureCause.PREEMPTED), max_recoveries=2, backoff_s=0
        ),
    )  # fmt: skip
    with runner_factory() as runner:
        handle = runner.run(app, "slurm", cfg)
    final: dict[str, Any] = {}

    def follow() -> None:  # the follower: records each end and submits the next attempt
        with runner_factory() as follower:
            final["status"] = follower.wait(handle, wait_interval=0.5, timeout=600)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    undo: list[Callable[[], None]] = []
    try:
        first, node0 = rec.wait_running(cluster, app.name, (ckpt / "held-0").exists)
        undo.append(rec.set_down(cluster, node0))
        _, node1 = rec.wait_running(cluster, app.name, (ckpt / "held-1").exists, skip={first})
        undo.pop()()  # node0 back (attempt 2 may need it)
        undo.append(rec.preempt(cluster, node1))
        follower.join(timeout=600)
    finally:
        for step in undo:
            step()
    assert not follower.is_alive(), "the follower did not end"
    status: AppStatus | None = final.get("status")
    assert status is not None and status.state == AppState.SUCCEEDED, status

    with runner_factory() as runner:
        attempts = runner.attempts(handle)
        assert [(a["state"], a["cause"]) for a in attempts] == [
            ("FAILED", "node_lost"), ("FAILED", "preempted"), ("SUCCEEDED", None),
        ], attempts  # fmt: skip
        ids = [parse_app_handle(a["handle"]).app_id for a in attempts]
        assert ids[0] == first
        logs = "".join(runner.log_lines(handle, app.roles[0].name))
        got = runner.outputs(handle)["final_loss"]
    rec.one_job_per_attempt(cluster, app.name, ids, ["NODE_FAIL", "PREEMPTED", "COMPLETED"])
    assert "holding after epoch 1" in logs and "holding after epoch 3" in logs, logs
    assert "resuming after epoch 1" in logs and "resuming after epoch 3" in logs, logs
    for epoch in range(5):  # each epoch trained once, over the three attempts
        assert logs.count(f"epoch {epoch}: loss") == 1, logs
    assert got == expected, (got, expected)
