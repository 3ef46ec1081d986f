"""Services started by tests die with the test process, or at the next session's start.

A service started with :func:`start_service` runs in its own session and process group (so
its daemons, which stay in the group, are stopped with it) and gets two guards:

* a watchdog: a small process of its own that waits for the test process to end (a pidfd,
  so an end by SIGKILL counts) and then stops the service's group: SIGTERM, then SIGKILL;
* a marker: ``<MARKER_DIR>/<pgid>.json`` naming the group, its leader's start time, the
  owning test process and the service's label. :func:`reap_leftovers` stops each group whose
  owner is gone, when the watchdog was killed too.

Some services leave processes outside their group: a real Kubernetes node's containerd
shims and containers, podman's ``conmon`` monitors and containers, Slurm's ``slurmstepd``
and the job steps under it. Such a service keeps
everything in one directory that names its owner (:func:`write_owner`), and its own reaper
tears down the directories of dead owners (:func:`tests.e2e.infra.kube_reap.reap_stale`,
:func:`tests.e2e.infra.podman.reap_stale`, :func:`tests.e2e.infra.slurm.reap_stale`).
:func:`reap_at_session_start`, called when a test session starts, runs all of them.

Both identify a process by pid and start time, so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tether" / \
    "test-services"
"""Where the markers of running test services are."""
GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when a service's group is stopped."""

_WATCHDOG = r"""
import os, select, signal, sys, time
owner, pgid, grace, born = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
try:
    fd = os.pidfd_open(owner)
    select.select([fd], [], [])
except ProcessLookupError:
    pass
try:
    with open(f"/proc/{pgid}/stat", "rb") as f:
        data = f.read()
    if data[data.rfind(b")") + 2 :].split()[19].decode() != born:
        sys.exit(0)  # the leader's pid is another process's now: the group is not ours
except OSError:
    pass  # the leader is gone; the id stays the group's while it has members
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
if alive():
    os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
"""


def start_time(pid: int) -> int | None:
    """The kernel start time of ``pid`` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rfind(b")") + 2 :].split()[19])


OWNER_FILE = "owner"
"""The file naming a service directory's owner (``<pid> <start time>``)."""


def write_owner(service_dir: Path) -> None:
    """Records this process (pid and start time, so a reused pid does not count) as the
    owner of a service's directory.

    Args:
        service_dir: The directory.
    """
    pid = os.getpid()
    (service_dir / OWNER_FILE).write_text(f"{pid} {start_time(pid)}\n")


def owner_alive(service_dir: Path) -> bool:
    """Whether the test process that owns ``service_dir`` still runs (a directory without
    an owner yet counts as owned for its first minute: it is being made).

    Args:
        service_dir: The directory.

    Returns:
        False once the owner is gone.
    """
    try:
        pid_s, start = (service_dir / OWNER_FILE).read_text().split()
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            return time.time() - service_dir.stat().st_mtime < 60
        return False
    return str(start_time(int(pid_s))) == start


def processes_naming(text: str, daemons: tuple[str, ...] = ()) -> list[int]:
    """The processes whose command line holds ``text`` (a service's directory), with their
    descendants; and the ``daemons`` (by process name) whose environment holds it, with every
    process of their sessions (a daemon's session is its own: a job step's, never a user's).
    Never this process. (Only the daemons' environment is read: a user's shell that exported
    a variable naming the directory is left alone.)

    Args:
        text: What to look for.
        daemons: Process names (``comm``) whose environment is searched too.

    Returns:
        Their pids.
    """
    needle = text.encode()
    parents: dict[int, int] = {}
    session: dict[int, int] = {}
    found: set[int] = set()
    sessions: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_bytes()
            fields = stat[stat.rfind(b")") + 2 :].split()
            parents[pid], session[pid] = int(fields[1]), int(fields[3])
            comm = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")
            if needle in (entry / "cmdline").read_bytes():
                found.add(pid)
            elif comm in daemons and needle in (entry / "environ").read_bytes():
                found.add(pid)
                sessions.add(session[pid])
    sessions.discard(os.getsid(0))
    found |= {pid for pid, sid in session.items() if sid in sessions}
    grew = True
    while grew:  # children, grandchildren... of what was found
        more = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


def kill_processes(pids: list[int]) -> None:
    """SIGKILLs ``pids`` and waits (bounded) until they are gone (a zombie counts).

    Args:
        pids: The processes.
    """
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] != b"Z"


def group_alive(pgid: int) -> bool:
    """Whether the process group ``pgid`` has a member (a zombie leader counts)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def start_service(argv: list[str], label: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Starts a test service in its own process group, guarded (see the module docs).

    Args:
        argv: The service's command line.
        label: What it is (``ray-head``, ``moto``...), kept in its marker.
        **popen: More ``subprocess.Popen`` arguments (``env``, ``stdout``...).

    Returns:
        The service's process (its pid is its group's id).
    """
    popen["start_new_session"] = True
    proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **popen)
    MARKER_DIR.mkdir(parents=True, exist_ok=True)
    marker = {
        "label": label, "pgid": proc.pid, "start_time": start_time(proc.pid),
        "owner": os.getpid(), "owner_start_time": start_time(os.getpid()),
    }  # fmt: skip
    (MARKER_DIR / f"{proc.pid}.json").write_text(json.dumps(marker))
    # what a watchdog says when it fails is kept: a service left unguarded must be explained
    log_fd = os.open(_watchdog_log(proc.pid), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _watchdogs[proc.pid] = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(proc.pid), str(GRACE_S),
             str(marker["start_time"])],
            stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(log_fd)
    return proc


def _watchdog_log(pgid: int) -> Path:
    return MARKER_DIR / f"{pgid}.watchdog.log"


def watchdog_pid(proc: subprocess.Popen[bytes]) -> int:
    """The pid of the watchdog guarding a service :func:`start_service` started here."""
    return _watchdogs[proc.pid].pid


_watchdogs: dict[int, subprocess.Popen[bytes]] = {}


def forget(proc: subprocess.Popen[bytes]) -> None:
    """For a service the test stopped itself: drops its marker and ends its watchdog (which
    would otherwise signal the group's id at the test process's end, when it may be reused).
    """
    with contextlib.suppress(FileNotFoundError):
        (MARKER_DIR / f"{proc.pid}.json").unlink()
    with contextlib.suppress(FileNotFoundError):
        _watchdog_log(proc.pid).unlink()
    watchdog = _watchdogs.pop(proc.pid, None)
    if watchdog is not None:
        watchdog.kill()
        watchdog.wait()


def _stop_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def reap_leftovers() -> list[str]:
    """Stops the services an earlier, killed test run left (their owner is gone).

    Returns:
        ``label (pgid N)`` of each group stopped.
    """
    reaped: list[str] = []
    try:
        markers = list(MARKER_DIR.glob("*.json"))
    except OSError:
        return reaped
    for path in markers:
        try:
            m = json.loads(path.read_text())
            pgid, owner = int(m["pgid"]), int(m["owner"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        owner_start = start_time(owner)
        if owner_start is not None and owner_start == m.get("owner_start_time"):
            continue  # its test process still runs
        leader = start_time(pgid)
        # the group is the service's while its leader is (same start time), or, with the
        # leader gone, while the id is held by the group's members (never reused then)
        if (leader is None or leader == m.get("start_time")) and group_alive(pgid):
            _stop_group(pgid)
            reaped.append(f"{m.get('label')} (pgid {pgid})")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(FileNotFoundError):
            _watchdog_log(pgid).unlink()
    return reaped


def reap_at_session_start() -> list[str]:
    """Stops everything an earlier, killed test run left: the process groups of its services
    (:func:`reap_leftovers`), then the real Kubernetes nodes, the podman services and the
    Slurm clusters whose test process is gone, with the shims, monitors, containers and job
    steps outside their groups.

    Returns:
        What was stopped, one line each.
    """
    from tests.e2e.infra import kube_reap, podman, slurm

    reaped = reap_leftovers()
    reaped += [f"kube node {name}" for name in kube_reap.reap_stale()]
    reaped += [f"podman service {path}" for path in podman.reap_stale()]
    reaped += [f"slurm cluster {path}" for path in slurm.reap_stale()]
    return reaped


def reaped_here_or_elsewhere(
    line: str, reaped: list[str], gone: Callable[[], bool], timeout: float = 60.0
) -> bool:
    """Whether a reap stopped a leftover: this one (``line`` is in what it returned), or a
    concurrent one. CI runs its test groups side by side, and every session start (and the
    reaper's own tests) reaps every killed run's leftovers on the machine, so another process
    may have taken it first; then it must be gone within ``timeout`` seconds.

    Args:
        line: What this reap reports for the leftover.
        reaped: What this reap returned.
        gone: Whether the leftover is gone.
        timeout: Seconds to wait for another reaper to finish.

    Returns:
        True when it was reaped (here or elsewhere).
    """
    if line in reaped:
        return True
    deadline = time.monotonic() + timeout
    while not gone():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
