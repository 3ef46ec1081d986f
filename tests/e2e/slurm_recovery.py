"""What the Slurm recovery e2e modules share: their own cluster, the real failures they
inject, and what they read back from Slurm to check there was one job per attempt.

Every module that sets a node DOWN or preempts a job starts a cluster of its own
(:func:`own_cluster`), so no other test's jobs are touched; each failure is undone after
the test all the same (:func:`resume`, the ``cancel`` that :func:`preempt` returns).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.infra.slurm import URGENT_PARTITION, SlurmCluster, SlurmUnavailable, missing_tools

WAIT_S = 180.0
"""Generous bound of every wait on the cluster (the machine may be loaded)."""

ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "OUT_OF_MEMORY",
        "DEADLINE",
    }
)
"""Slurm's states of a job that ended."""

_PATH = os.environ.get("PATH", os.defpath)
"""The PATH the Slurm commands are found on, as it was on import: a test may empty its own
to prove the scheduler reaches Slurm through a transport only."""


def slurm(
    cluster: SlurmCluster, *argv: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs a Slurm command against ``cluster`` (found on the PATH of :data:`_PATH`).

    Args:
        cluster: The cluster.
        *argv: The command line.
        check: Raise on a non-zero exit.

    Returns:
        The finished process (text output).
    """
    env = {**cluster.env(), "PATH": _PATH}
    res = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise AssertionError(f"`{' '.join(argv)}` failed ({res.returncode}): {res.stderr}")
    return res


def own_cluster(jwt: bool = False) -> Iterator[SlurmCluster]:
    """A module fixture's body: a preemption cluster of the module's own (skips when Slurm
    is not installed; fails when it is and does not start).

    Args:
        jwt: Also accept JWTs (for slurmrestd).

    Yields:
        The running cluster; it is stopped afterwards.
    """
    missing = missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}); run "
                    "tests/e2e/infra/setup.d/30-slurm.sh")  # fmt: skip
    try:
        c = SlurmCluster(preemption=True, jwt=jwt).start()
    except SlurmUnavailable as e:
        pytest.fail(f"the preemption cluster did not start: {e}")
    try:
        yield c
    finally:
        c.stop()


def jobs(cluster: SlurmCluster, name: str) -> dict[str, tuple[str, str, str, str]]:
    """Every job of the cluster named ``name``.

    Args:
        cluster: The cluster.
        name: The Slurm job name (the app's name).

    Returns:
        Job id -> (state, submit time, end time, node list).
    """
    out = slurm(
        cluster,
        "squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%V|%e|%N"
    ).stdout  # fmt: skip
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {r[0]: (r[2], r[3], r[4], r[5]) for r in rows if r[1] == name}


def wait_running(cluster: SlurmCluster, name: str, ready: Callable[[], bool],
                 skip: set[str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Waits until a job named ``name`` (not one of ``skip``) runs and ``ready()`` holds.

    Args:
        cluster: The cluster.
        name: The job name.
        ready: What the job has done once it is worth failing (e.g. a checkpoint saved).
        skip: Job ids to pass over (earlier attempts).

    Returns:
        The job id and the node it runs on.
    """
    deadline = time.monotonic() + WAIT_S
    seen: dict[str, tuple[str, str, str, str]] = {}
    while time.monotonic() < deadline:
        seen = jobs(cluster, name)
        running = [(i, j[3]) for i, j in seen.items()
                   if j[0] == "RUNNING" and i not in (skip or ())]  # fmt: skip
        if running and ready():
            return running[0]
        ended = {i: j for i, j in seen.items() if i not in (skip or ()) and j[0] in ENDED}
        assert not ended, f"job {name} ended before it was failed: {ended}"
        time.sleep(0.3)
    raise AssertionError(f"no job {name} ran (and got ready) in {WAIT_S:.0f}s: {seen}")


def set_down(cluster: SlurmCluster, node: str) -> Callable[[], None]:
    """Sets ``node`` DOWN (Slurm ends its jobs ``NODE_FAIL``).

    Args:
        cluster: The cluster.
        node: The node.

    Returns:
        How to undo it (:func:`resume`).
    """
    slurm(cluster, "scontrol", "update", f"nodename={node}", "state=DOWN",
                "reason=tether-recovery-e2e")  # fmt: skip
    return lambda: resume(cluster, node)


def preempt(cluster: SlurmCluster, node: str, seconds: int = 2) -> Callable[[], None]:
    """Submits a job of the urgent partition that needs ``node`` whole: Slurm preempts the
    default partition's jobs there (a job that may not be requeued ends ``PREEMPTED``).

    Args:
        cluster: The cluster.
        node: The node.
        seconds: How long the urgent job runs.

    Returns:
        How to undo it (cancels the urgent job).
    """
    out = slurm(
        cluster,
        "sbatch", "--parsable", f"--partition={URGENT_PARTITION}", "--exclusive",
        f"--nodelist={node}", "--job-name=urgent", "--output=/dev/null", "--wrap",
        f"sleep {seconds}",
    ).stdout  # fmt: skip
    job = out.strip().split(";")[0]

    def cancel() -> None:
        slurm(cluster, "scancel", job, check=False)

    return cancel


def resume(cluster: SlurmCluster, node: str) -> None:
    """Puts a node set DOWN back into service and waits until it is usable again.

    Args:
        cluster: The cluster.
        node: The node.
    """
    slurm(cluster, "scontrol", "update", f"nodename={node}", "state=RESUME", check=False)
    deadline = time.monotonic() + WAIT_S
    state = ""
    while time.monotonic() < deadline:
        state = slurm(cluster, "sinfo", "-h", "-n", node, "-o", "%t", check=False).stdout.strip()
        if state in ("idle", "mix", "alloc"):
            return
        time.sleep(0.3)
    raise AssertionError(f"node {node} did not come back after RESUME (sinfo: {state!r})")


def one_job_per_attempt(cluster: SlurmCluster, name: str, ids: list[str],
                        states: list[str]) -> None:  # fmt: skip
    """Checks the cluster ran exactly one job per attempt, in ``states``, each ended before
    the next was submitted (never two attempts at once).

    Args:
        cluster: The cluster.
        name: The job name.
        ids: The attempts' Slurm job ids, in order.
        states: Each attempt's final Slurm state.
    """
    seen = jobs(cluster, name)
    assert sorted(seen) == sorted(ids), seen  # no duplicate, none missing
    assert [seen[i][0] for i in ids] == states, seen
    for before, after in itertools.pairwise(ids):
        assert seen[before][2] <= seen[after][1], seen  # ended before the next was submitted
