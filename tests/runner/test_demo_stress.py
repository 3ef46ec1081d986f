"""The demo job (`make demo`) under load: it must succeed every time, not most times."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tether.components.dist import ddp
from tether.runner import get_runner
from tether.specs import AppState

REPO = Path(__file__).resolve().parents[2]
RUNS = 20
AT_ONCE = 4


@pytest.mark.slow
@pytest.mark.timeout(900)  # 20 jobs of 2 ranks on 2 shared cores: room for a busy machine
def test_demo_job_succeeds_20_of_20_four_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun's `python` must be this interpreter (the one with torch), as in `make demo`
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    script = str(REPO / "examples" / "apps" / "train_ddp.py")

    def one(i: int) -> tuple[int, str, str]:
        app = ddp(script=script, j="1x2")  # exactly what `make demo` runs
        with get_runner() as runner:
            handle = runner.run(app, "local_cwd")
            status = runner.wait(handle, wait_interval=0.2)
            logs = "".join(runner.log_lines(handle, app.roles[0].name, 0))
        state = status.state.name if status else "UNKNOWN"
        return i, state, logs

    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(one, range(RUNS)))
    bad = [(i, state, logs[-2000:]) for i, state, logs in results
           if state != AppState.SUCCEEDED.name
           or "rank 0: done" not in logs or "rank 1: done" not in logs]
    assert not bad, f"{len(bad)} of {RUNS} demo runs went wrong; first: {bad[0]}"
