"""Real Slurm faults for the adapter tests: a node set DOWN under a running job (and the
checks of its recovery), and a QOS with no room (a submit limit, for failover).

The adapter tests run ``tests/adapters/recovering_app.py:lost`` on the session's Slurm
cluster (``slurm_cluster``: two slurmd nodes) through the orchestrator, which blocks while
it follows the job. :class:`NodeDownUnder` waits in a thread until attempt 0 runs and saved
its checkpoint, then sets its node DOWN (``scontrol update state=DOWN``: Slurm ends the job
``NODE_FAIL``, a real infrastructure failure) and puts the node back into service when the
test ends. :func:`check_recovered` checks the outcome a user cares about: one logical job,
two attempts (a ``node_lost`` one and a ``SUCCEEDED`` one), exactly one Slurm job per
attempt, the second submitted after the first ended, and resumed from the checkpoint.

:func:`qos_without_room` makes a QOS that allows the user no job (``MaxSubmitJobsPerUser=0``)
on the session's cluster with accounting (``slurm_acct_cluster``): sbatch refuses a job that
asks for it with ``job submit limit``, which tether reports as a capacity refusal.
"""

from __future__ import annotations

import getpass
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.slurm_recovery import jobs as _jobs
from tests.e2e.slurm_recovery import resume as _resume
from tether.runner import get_runner
from tether.specs import parse_app_handle

INJECT_TIMEOUT_S = 240.0
"""How long attempt 0 may take to start and save its checkpoint (generous: a loaded CI)."""


class NodeDownUnder:
    """Sets DOWN the node that runs attempt 0 of the Slurm job ``name`` once it saved its
    checkpoint; resumes the node on exit.

    Args:
        cluster: The :class:`tests.e2e.infra.slurm.SlurmCluster`.
        name: The job name (the app's name).
        ckpt: The checkpoint directory attempt 0 writes ``step`` into.
    """

    def __init__(self, cluster: Any, name: str, ckpt: Path) -> None:
        self.cluster = cluster
        self.name = name
        self.ckpt = ckpt
        self.node: str | None = None
        self.job: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._inject, daemon=True)

    def __enter__(self) -> NodeDownUnder:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        self._thread.join(timeout=60)
        if self.node is not None:
            _resume(self.cluster, self.node)

    def _inject(self) -> None:
        deadline = time.monotonic() + INJECT_TIMEOUT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            out = self.cluster.run("squeue", "--noheader", "--states=RUNNING",
                                   f"--name={self.name}", "--format=%i|%N",
                                   check=False).stdout  # fmt: skip
            rows = [line.split("|") for line in out.splitlines() if "|" in line]
            if rows and rows[0][1] and (self.ckpt / "step").exists():
                self.job, node = rows[0][0], rows[0][1]
                self.cluster.run("scontrol", "update", f"nodename={node}", "state=DOWN",
                                 "reason=tether-adapter-recovery-e2e")  # fmt: skip
                self.node = node
                return
            self._stop.wait(0.3)


def check_recovered(cluster: Any, down: NodeDownUnder, handle: str) -> list[str]:
    """Checks the logical job ``handle`` recovered from the node set DOWN under attempt 0.

    Args:
        cluster: The Slurm cluster.
        down: The injector (it set a node DOWN).
        handle: The logical job's handle (``chain://...``).

    Returns:
        The logical job's log lines of role ``train`` (the caller checks what it showed).
    """
    assert down.node is not None, "attempt 0 never ran with its checkpoint saved"
    assert handle.startswith("chain://"), handle
    with get_runner() as runner:
        attempts = runner.attempts(handle)
        lines = list(runner.log_lines(handle, "train"))
    assert [(a["attempt"], a["scheduler"], a["state"], a["cause"]) for a in attempts] == [
        (0, "slurm", "FAILED", "node_lost"),
        (1, "slurm", "SUCCEEDED", None),
    ], attempts
    ids = [parse_app_handle(a["handle"]).app_id for a in attempts]
    assert ids[0] == down.job, (ids, down.job)
    jobs = _jobs(cluster, down.name)
    assert sorted(jobs) == sorted(ids), jobs  # one Slurm job per attempt: no duplicate
    first, second = jobs[ids[0]], jobs[ids[1]]
    assert first[0] == "NODE_FAIL" and second[0] == "COMPLETED", jobs
    assert first[2] <= second[1], jobs  # attempt 0 ended before attempt 1 was submitted
    # Slurm's own line about the node failure (slurmstepd's, on attempt 0's stderr) comes
    # when slurmstepd writes it before the step dies; it is no line of the app's
    ours = [line for line in lines if not line.startswith("slurmstepd")]
    assert ours == ["[tether] attempt 0 on slurm\n", "attempt 0\n",
                    "[tether] attempt 1 on slurm\n", "attempt 1\n",
                    "resumed at step 5\n"], lines  # fmt: skip
    return lines


def qos_without_room(cluster: Any, name: str = "noroom") -> str:
    """A QOS that allows this user no job, granted to the user, once slurmctld enforces it.

    slurmdbd pushes a new QOS to slurmctld a moment after ``sacctmgr`` returns; until then
    sbatch answers ``Invalid qos specification``, so this waits until a job asking for the
    QOS is refused for its submit limit.

    Args:
        cluster: A Slurm cluster with accounting.
        name: The QOS's name.

    Returns:
        The QOS's name.
    """
    cluster.run("sacctmgr", "-i", "add", "qos", name, "MaxSubmitJobsPerUser=0", check=False)
    cluster.run("sacctmgr", "-i", "modify", "user", getpass.getuser(), "set", f"qos+={name}")
    deadline = time.monotonic() + 120
    while True:
        probe = cluster.run("sbatch", f"--qos={name}", "--output=/dev/null", "--wrap", "true",
                            check=False)  # fmt: skip
        assert probe.returncode != 0, f"sbatch took a job over QOS {name}'s limit: {probe}"
        if "job submit limit" in probe.stderr:
            return name
        assert time.monotonic() < deadline, f"QOS {name} never held: {probe.stderr}"
        time.sleep(0.5)
