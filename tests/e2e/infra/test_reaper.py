"""Test services die with the test process that started them (tests/e2e/infra/reaper.py).

Real processes: a stand-in for a pytest run starts a "service" (a shell and a daemon it
forks, in one process group) through :func:`start_service`, then is SIGKILLed, as a run
killed at its timeout is. The service must go away by itself (its watchdog), and when the
watchdog was killed too, the next session's :func:`reap_leftovers` must stop it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

from tests.e2e.infra.reaper import group_alive, reap_leftovers

OWNER = textwrap.dedent("""
    import sys, time
    from tests.e2e.infra.reaper import start_service, watchdog_pid
    proc = start_service(["sh", "-c", "sleep 600 & sleep 600; wait", sys.argv[1]], "stand-in")
    print(proc.pid, watchdog_pid(proc), flush=True)
    time.sleep(600)
""")


def start_owner() -> tuple[subprocess.Popen[str], int, int]:
    """A stand-in test process with a service; returns it, the service's group id and the
    pid of the service's watchdog."""
    label = f"tether-reaper-test-{uuid.uuid4().hex}"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, label], stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd())
    assert owner.stdout is not None
    pgid, watchdog = (int(n) for n in owner.stdout.readline().split())
    assert group_alive(pgid)
    return owner, pgid, watchdog


def wait_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 60
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not group_alive(pgid)


def test_a_service_dies_with_its_killed_test_process() -> None:
    owner, pgid, _ = start_owner()
    owner.kill()
    owner.wait()
    assert wait_gone(pgid), "the service outlived its test process"
    reap_leftovers()  # its marker is dropped; nothing else to stop


def test_a_session_start_reaps_what_a_killed_run_and_its_watchdog_left() -> None:
    owner, pgid, watchdog = start_owner()
    with contextlib.suppress(ProcessLookupError):
        os.kill(watchdog, signal.SIGKILL)
    owner.kill()
    owner.wait()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(watchdog, 0)
    assert group_alive(pgid), "nothing stopped it yet"
    try:
        assert any(f"(pgid {pgid})" in r for r in reap_leftovers())
        assert wait_gone(pgid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_running_test_process_keeps_its_service() -> None:
    owner, pgid, _ = start_owner()
    try:
        assert not any(f"(pgid {pgid})" in r for r in reap_leftovers())
        assert group_alive(pgid)
    finally:
        owner.kill()
        owner.wait()
    assert wait_gone(pgid)
