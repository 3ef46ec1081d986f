"""The demo's DDP training (``examples/apps/train_ddp.py``, two ranks through torchrun on
``local_cwd``) checkpoints each epoch to ``$TETHER_CHECKPOINT``: cut short twice and
recovered, it ends with the same loss as a run never interrupted.

``local_cwd`` has no infrastructure to preempt, so the attempts are cut short by the app's
own ``after_epoch`` hook (``tests/runner/ddp_preempted.py``) and the policy recovers the
``application`` cause: the loop is the one a preemption goes through.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.components.dist import ddp
from tether.runner import Runner
from tether.specs import AppState, RecoveryPolicy

REPO = Path(__file__).resolve().parents[2]
EPOCHS = ["--epochs", "5", "--samples", "256"]


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    # torchrun's `python` must be this interpreter (the one with torch), as in `make demo`
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    with Runner() as r:
        yield r


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ddp_cut_short_twice_ends_like_an_uninterrupted_run(
    runner: Runner, tmp_path: Path
) -> None:
    plain = ddp(*EPOCHS, script=str(REPO / "examples" / "apps" / "train_ddp.py"), j="1x2")
    handle = runner.run(plain, "local_cwd")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    expected = runner.outputs(handle)["final_loss"]

    cut = ddp(*EPOCHS, script=str(REPO / "tests" / "runner" / "ddp_preempted.py"), j="1x2")
    cut = dataclasses.replace(
        cut, checkpoint=str(tmp_path / "ckpt"),
        recovery=RecoveryPolicy(on=["application"], max_recoveries=2, backoff_s=0),
    )  # fmt: skip
    handle = runner.run(cut, "local_cwd")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    assert [a["state"] for a in runner.attempts(handle)] == ["FAILED", "FAILED", "SUCCEEDED"]
    logs = "".join(runner.log_lines(handle, cut.roles[0].name))
    assert "preempted after epoch 1" in logs and "preempted after epoch 3" in logs
    assert "resuming after epoch 1" in logs and "resuming after epoch 3" in logs
    for epoch in range(5):  # each epoch trained once, over the three attempts
        assert logs.count(f"epoch {epoch}: loss") == 1, logs
    assert runner.outputs(handle)["final_loss"] == expected
