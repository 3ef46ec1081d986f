"""``tether run`` (the CLI in its own process, as a user runs it) recovering a Slurm job
whose node is set DOWN mid-run, then ``tether status``/``describe``/``log`` of the logical
handle in new processes.

The cluster is the module's own (``tests/e2e/slurm_recovery.py``). ``tether run --log`` is
the follower: when Slurm ends attempt 0 ``NODE_FAIL`` it records ``node_lost`` (a cause the
app's policy recovers from), submits attempt 1, which resumes from attempt 0's checkpoint on
the other node, and ends when attempt 1 succeeds, all under one logical handle.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import slurm_recovery as rec
from tests.e2e.infra.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

COMPONENT = '''
from tether.specs import AppDef, RecoveryPolicy, Role

SCRIPT = """\\
set -eu
echo "attempt $TETHER_ATTEMPT on $SLURMD_NODENAME"
if [ "$TETHER_ATTEMPT" = 0 ]; then
  mkdir -p "$TETHER_CHECKPOINT"
  echo 5 > "$TETHER_CHECKPOINT/step.tmp"
  mv "$TETHER_CHECKPOINT/step.tmp" "$TETHER_CHECKPOINT/step"
  exec sleep 600
fi
echo "resumed at step $(cat "$TETHER_CHECKPOINT/step")"
"""


def train(ckpt: str) -> AppDef:
    """Saves a checkpoint, then runs until its node fails; a later attempt resumes."""
    return AppDef("cli-nodefail", roles=[Role("w", entrypoint="bash", args=["-c", SCRIPT])],
                  checkpoint=ckpt, recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))
'''
NAME = "cli-nodefail"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    yield from rec.own_cluster()


def test_tether_run_recovers_a_node_set_down_as_the_next_attempt(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    (tmp_path / "comp.py").write_text(COMPONENT)
    (tmp_path / "tetherconfig.ini").write_text("")
    ckpt = tmp_path / "ckpt"
    env = {**cluster.env(), "TETHER_STATE_DIR": str(tmp_path / "state"),
           "TETHERCONFIG": str(tmp_path / "tetherconfig.ini")}  # fmt: skip
    cli = [sys.executable, "-m", "tether.cli.main"]

    def tether(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *argv], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=rec.WAIT_S, check=False)  # fmt: skip

    run = subprocess.Popen(
        [*cli, "run", "-s", "slurm", "-cfg", f"job_dir={tmp_path / 'jobs'}", "--log",
         "comp.py:train", "--ckpt", str(ckpt)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    undo: Callable[[], None] | None = None
    try:

        def saved() -> bool:
            assert run.poll() is None, f"tether run ended early: {run.communicate()}"
            return (ckpt / "step").exists()

        first, node = rec.wait_running(cluster, NAME, saved)
        undo = rec.set_down(cluster, node)
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if undo is not None:
            undo()
    assert run.returncode == 0, out + err
    handle, *logs, final = out.splitlines()
    assert handle.startswith("chain://") and final == f"{handle} SUCCEEDED", out
    # Slurm may add its own line to the output ("slurmstepd-n1: error: *** STEP ... CANCELLED
    # ... DUE TO NODE FAILURE ***"); the node that runs attempt 1 is Slurm's choice
    # (ReturnToService=2 may give the one set DOWN back at once)
    ours = [line for line in logs if not line.startswith("slurmstepd-")]
    assert ours[:3] == [
        "[tether] attempt 0 on slurm", f"attempt 0 on {node}", "[tether] attempt 1 on slurm",
    ], out  # fmt: skip
    assert ours[3].startswith("attempt 1 on ") and ours[4:] == ["resumed at step 5"], out

    described = tether("describe", handle)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    attempts = [a.split() for a in lines[lines.index("Attempts:") + 1 :]]
    assert [a[:2] + a[3:] for a in attempts] == [
        ["0:", "slurm", "FAILED", "(node_lost)"], ["1:", "slurm", "SUCCEEDED"],
    ], described.stdout  # fmt: skip
    ids = [a[2].rsplit("/", 1)[-1] for a in attempts]  # slurm://SESSION/JOBID
    assert ids[0] == first, described.stdout
    rec.one_job_per_attempt(cluster, NAME, ids, ["NODE_FAIL", "COMPLETED"])

    status = tether("status", handle)
    assert status.returncode == 0, status.stderr
    assert "State: SUCCEEDED" in status.stdout and "Num Restarts: 1" in status.stdout, status.stdout
    assert "attempt 1 on slurm (earlier: attempt 0 on slurm: FAILED (node_lost))" in (
        status.stdout
    ), status.stdout
    log = tether("log", handle)
    assert log.returncode == 0, log.stderr
    assert "[tether] attempt 0 on slurm" in log.stdout, log.stdout
    assert "[tether] attempt 1 on slurm" in log.stdout, log.stdout
    assert log.stdout.index("[tether] attempt 1 on slurm") > log.stdout.index(
        f"attempt 0 on {node}"
    ), log.stdout
    assert "resumed at step 5" in log.stdout, log.stdout
