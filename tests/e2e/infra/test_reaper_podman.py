"""A killed test run's podman containers are stopped at the next session's start.

Real podman: a stand-in for a pytest run starts a :class:`PodmanService` and a container in
it, then is SIGKILLed (its service's watchdog too), as a run killed at its timeout is. The
container's ``conmon`` monitor runs in a session of its own, outside the service's process
group, so the watchdog cannot stop it; :func:`reap_at_session_start` (what
``pytest_sessionstart`` calls) must remove it and the service's storage.
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

from tests.e2e.infra.podman import missing_tools
from tests.e2e.infra.reaper import reap_at_session_start, reaped_here_or_elsewhere

pytestmark = pytest.mark.e2e

OWNER = textwrap.dedent("""
    import subprocess, time
    from tests.e2e.infra.podman import PodmanService
    from tests.e2e.infra.reaper import watchdog_pid
    svc = PodmanService().start()
    run = subprocess.run(svc.podman("run", "-d", "--network", "none", svc.image, "sleep", "600"),
                         env=svc.env(), capture_output=True, text=True, check=True)
    conmon = (svc.dir / "run" / "overlay-containers" / run.stdout.strip() / "userdata"
              / "conmon.pid").read_text().strip()
    print(watchdog_pid(svc._proc), conmon, svc.dir, flush=True)
    time.sleep(600)
""")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_session_start_removes_the_containers_a_killed_run_left() -> None:
    missing = missing_tools()
    if missing:
        pytest.skip(f"podman is not installed here (missing {', '.join(missing)})")
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             cwd=os.getcwd())
    assert owner.stdout is not None
    line = owner.stdout.readline().split()
    assert line, "the stand-in test process could not start podman"
    watchdog, conmon, service_dir = int(line[0]), int(line[1]), Path(line[2])
    try:
        os.kill(watchdog, signal.SIGKILL)
        owner.kill()
        owner.wait()
        assert alive(conmon), "the container's monitor outlives its test process"
        reaped = reap_at_session_start()
        assert reaped_here_or_elsewhere(f"podman service {service_dir}", reaped,
                                        lambda: not service_dir.exists())  # fmt: skip
        deadline = time.monotonic() + 60
        while alive(conmon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(conmon), "the container outlived the next session's start"
        assert not service_dir.exists()
    finally:
        owner.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(conmon, signal.SIGKILL)
