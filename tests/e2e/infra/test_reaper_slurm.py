"""A killed test run's Slurm job steps are stopped at the next session's start.

Real Slurm: a stand-in for a pytest run starts a :class:`SlurmCluster` and a batch job, then
is SIGKILLed, as a run killed at its timeout is. The daemons' watchdogs stop the daemons,
but ``slurmstepd`` and the job's processes run in a session of their own, outside every
daemon's process group; :func:`reap_at_session_start` (what ``pytest_sessionstart`` calls)
must stop them and remove the cluster's directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e.infra.reaper import reap_at_session_start, reaped_here_or_elsewhere
from tests.e2e.infra.slurm import missing_tools

pytestmark = pytest.mark.e2e

OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.e2e.infra.slurm import SlurmCluster
    cluster = SlurmCluster().start()
    pidfile = Path(sys.argv[1])
    cluster.run("sbatch", f"--chdir={pidfile.parent}", "--wrap",
                f"echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; sleep 600")
    deadline = time.monotonic() + 120
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    print(pidfile.read_text().strip(), cluster.dir, flush=True)
    time.sleep(600)
""")


def of_cluster(cluster_dir: Path) -> list[int]:
    """The running processes whose command line or environment names the cluster's dir."""
    needle = f"{cluster_dir}/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if (needle in (entry / "cmdline").read_bytes()
                        or needle in (entry / "environ").read_bytes()):
                    found.append(int(entry.name))
    return [p for p in found if alive(p)]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_session_start_stops_the_job_steps_a_killed_run_left(tmp_path: Path) -> None:
    missing = missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)})")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "job.pid")],
                             stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert owner.stdout is not None
    line = owner.stdout.readline().split()
    assert line, "the stand-in test process could not run a Slurm job"
    job, cluster_dir = int(line[0]), Path(line[1])
    try:
        owner.kill()
        owner.wait()
        time.sleep(1)  # the daemons' watchdogs stop the daemons; the job step stays
        assert alive(job), "the job step outlives its test process"
        assert len(of_cluster(cluster_dir)) >= 3  # slurmstepd, the batch shell, its sleep
        reaped = reap_at_session_start()
        assert reaped_here_or_elsewhere(f"slurm cluster {cluster_dir}", reaped,
                                        lambda: not cluster_dir.exists())  # fmt: skip
        deadline = time.monotonic() + 60
        while of_cluster(cluster_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert of_cluster(cluster_dir) == [], "the job step outlived the next session's start"
        assert not cluster_dir.exists()
    finally:
        owner.kill()
        for pid in of_cluster(cluster_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
