"""Recovery from real Slurm infrastructure failures, through ``Runner.run`` and
``Runner.wait`` under one logical handle.

The cluster is the test's own (``SlurmCluster(preemption=True)``: munged, slurmctld, two
slurmd nodes, and a partition ``urgent`` whose jobs preempt the default partition's), so a
node set DOWN or a preemption touches no other test's jobs; each failure is undone in a
``finally`` all the same. The failures are Slurm's own: ``scontrol update state=DOWN`` on
the node that runs attempt 0 (Slurm ends the job ``NODE_FAIL``), and a job of the urgent
partition that needs that node whole (Slurm preempts attempt 0, which is not requeueable,
as ``PREEMPTED``). tether reads the cause from ``squeue``, records it and submits attempt 1,
which resumes from the checkpoint attempt 0 left. The module fills the ``slurm`` cell of
the portability matrix's recovery row (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import slurm_recovery as rec
from tests.e2e.infra.slurm import SlurmCluster
from tests.e2e.matrix.table import RECOVERY, recovery_cell, write_doc
from tether.runner import Runner
from tether.specs import AppDef, AppState, RecoveryPolicy, Role, parse_app_handle

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# attempt 0 saves a checkpoint (step 5) and runs until the infrastructure fails under it;
# a later attempt resumes from the checkpoint and ends.
SCRIPT = """\
set -eu
echo "attempt $TETHER_ATTEMPT on $SLURMD_NODENAME"
if [ "$TETHER_ATTEMPT" = 0 ]; then
  mkdir -p "$TETHER_CHECKPOINT"
  echo 5 > "$TETHER_CHECKPOINT/step.tmp"
  mv "$TETHER_CHECKPOINT/step.tmp" "$TETHER_CHECKPOINT/step"
  exec sleep 300
fi
echo "resumed at step $(cat "$TETHER_CHECKPOINT/step") from $TETHER_CHECKPOINT"
"""


OUTCOMES: dict[str, bool] = {}
"""Test name -> whether it passed (for the matrix cell)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cell() -> Iterator[None]:
    yield
    if OUTCOMES:
        how = "a node set DOWN (`NODE_FAIL`) and a preemption (`PREEMPTED`), through the Runner"
        write_doc({(RECOVERY, "slurm"): recovery_cell("slurm", OUTCOMES, how)})


@pytest.fixture
def passed(cluster: SlurmCluster, request: pytest.FixtureRequest) -> Callable[[], None]:
    """Records the test as failed until it calls the returned function at its end."""
    OUTCOMES[request.node.name] = False
    return lambda: OUTCOMES.__setitem__(request.node.name, True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    yield from rec.own_cluster()


@pytest.fixture
def runner(cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner("e2e", scheduler_params={"slurm": {"slurm_conf": str(cluster.conf)}}) as r:
        yield r


def _app(name: str, ckpt: Path) -> AppDef:
    return AppDef(
        name, roles=[Role("w", entrypoint="bash", args=["-c", SCRIPT])],
        recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0), checkpoint=str(ckpt),
    )  # fmt: skip


def _running_node(runner: Runner, handle: str, ckpt: Path) -> str:
    """The node attempt 0 runs on, once it saved its checkpoint."""
    deadline = time.monotonic() + 120
    while True:
        st = runner.status(handle)
        if st is not None and st.state == AppState.RUNNING and (ckpt / "step").exists():
            node = st.roles[0].replicas[0].hostname
            if node:
                return node
        assert time.monotonic() < deadline, f"attempt 0 never ran: {st}"
        time.sleep(0.3)


def _recovered(
    cluster: SlurmCluster, runner: Runner, tmp_path: Path, name: str,
    fail: Callable[[str], Callable[[], None]], cause: str, native: str,
    passed: Callable[[], None],
) -> None:  # fmt: skip
    """Runs the app, fails the infrastructure under attempt 0 (``fail(node)`` returns how
    to undo it), follows the logical job and checks attempt 1 recovered it: the attempt
    recorded with ``cause``, its Slurm job ended in state ``native``."""
    ckpt = tmp_path / "ckpt"
    handle = runner.run(_app(name, ckpt), "slurm", {"job_dir": str(tmp_path / "jobs")})
    assert handle.startswith("chain://")
    node = _running_node(runner, handle, ckpt)
    assert node in cluster.nodes
    undo: Callable[[], None] | None = None
    try:
        undo = fail(node)
        final = runner.wait(handle, wait_interval=0.5, timeout=200)
    finally:
        if undo is not None:
            undo()
    assert final is not None and final.state == AppState.SUCCEEDED, final
    assert final.num_restarts == 1 and final.msg.startswith("attempt 1 on slurm"), final

    attempts = runner.attempts(handle)
    assert [(a["attempt"], a["scheduler"], a["state"], a["cause"]) for a in attempts] == [
        (0, "slurm", "FAILED", cause),
        (1, "slurm", "SUCCEEDED", None),
    ]
    ids = [parse_app_handle(a["handle"]).app_id for a in attempts]
    rec.one_job_per_attempt(cluster, name, ids, [native, "COMPLETED"])

    lines = list(runner.log_lines(handle, "w"))
    assert lines[0] == "[tether] attempt 0 on slurm\n", lines
    assert lines[1] == f"attempt 0 on {node}\n", lines
    after = lines[lines.index("[tether] attempt 1 on slurm\n") + 1 :]
    assert after[0].startswith("attempt 1 on ") and after[1:] == [
        f"resumed at step 5 from {ckpt}\n"
    ], lines
    passed()


def test_node_set_down_mid_run_is_recovered_as_the_next_attempt(
    cluster: SlurmCluster, runner: Runner, tmp_path: Path, passed: Callable[[], None]
) -> None:
    """``scontrol update state=DOWN`` on attempt 0's node: Slurm ends it ``NODE_FAIL``
    (``node_lost``); attempt 1 runs on the other node from the checkpoint."""

    def down(node: str) -> Callable[[], None]:
        return rec.set_down(cluster, node)

    _recovered(cluster, runner, tmp_path, "rec-nodefail", down, "node_lost", "NODE_FAIL", passed)


def test_preempted_mid_run_is_recovered_as_the_next_attempt(
    cluster: SlurmCluster, runner: Runner, tmp_path: Path, passed: Callable[[], None]
) -> None:
    """A job of the urgent partition needs attempt 0's node whole: Slurm preempts attempt 0
    (``PreemptMode=REQUEUE``; tether's jobs are ``--no-requeue``, so Slurm cancels it as
    ``PREEMPTED`` rather than running it again itself); attempt 1 resumes it."""

    def preempt(node: str) -> Callable[[], None]:
        return rec.preempt(cluster, node)

    _recovered(
        cluster, runner, tmp_path, "rec-preempted", preempt, "preempted", "PREEMPTED", passed
    )
