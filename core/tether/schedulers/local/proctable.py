"""The process table, read and signalled: ``/proc/<pid>/stat``, pids, process groups.

Used by the supervisor for its replicas and by any other process (a launcher, ``cancel``,
recovery after a crash) for the processes a record names. A pid is identified together with
its start time, so a reused pid never counts as the process recorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DRAIN_AFTER_KILL_S = 1.0
"""After SIGKILL, how long the pipes may still deliver data before they are closed."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` tether needs.

    Attributes:
        pid: The process id.
        state: One-letter state (``R``, ``S``, ``Z`` for a zombie...).
        ppid: The parent's pid.
        pgid: The process group id.
        start_time: Start time in clock ticks since boot (with ``pid``, a unique identity).
        sid: The session id.
    """

    pid: int
    state: str
    ppid: int
    pgid: int
    start_time: int
    sid: int = -1

    @property
    def dead(self) -> bool:
        """Whether the process exited (a zombie or being reaped)."""
        return self.state in ("Z", "X", "x")


def _has_proc() -> bool:
    return os.path.isdir("/proc/self")


def read_stat(pid: int) -> ProcStat | None:
    """Reads ``/proc/<pid>/stat``.

    Args:
        pid: The process id.

    Returns:
        The stat, or None when there is no such process (or no /proc).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(pid, rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[19]),
                        int(rest[3]))
    except (IndexError, ValueError):
        return None


def start_time_of(pid: int) -> int | None:
    """The kernel start time of ``pid`` (None when unknown)."""
    st = read_stat(pid)
    return st.start_time if st is not None else None


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether the process ``pid`` runs (zombies count as dead).

    Args:
        pid: The process id.
        start_time: Its recorded start time; a process with another start time is a reuse of
            the pid and counts as dead.

    Returns:
        True if it is alive.
    """
    if not _has_proc():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    st = read_stat(pid)
    if st is None or st.dead:
        return False
    return start_time is None or st.start_time == start_time


def all_stats() -> list[ProcStat]:
    """The stat of every process visible in ``/proc``."""
    out: list[ProcStat] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                out.append(st)
    return out


def descendants(pid: int) -> list[int]:
    """The pids of every descendant of ``pid`` (children, their children...), from one scan.

    Args:
        pid: The process.

    Returns:
        The pids (empty without /proc).
    """
    children: dict[int, list[int]] = {}
    for s in all_stats():
        children.setdefault(s.ppid, []).append(s.pid)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def signal_group(pgid: int, sig: int) -> bool:
    """Sends ``sig`` to the process group ``pgid``.

    Args:
        pgid: The process group id.
        sig: The signal.

    Returns:
        True if the group exists (the signal was delivered to at least one member).
    """
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether the process group ``pgid`` has a live (non-zombie) member.

    Args:
        pgid: The process group id.

    Returns:
        True if a member is alive.
    """
    if not signal_group(pgid, 0):
        return False
    if not _has_proc():
        return True
    return any(s.pgid == pgid and not s.dead for s in all_stats())


def group_is_ours(pgid: int, start_time: int | None) -> bool:
    """Whether the group ``pgid`` is still the one a replica started (pid-reuse guard).

    A replica's pid is its group id. While the leader lives, its start time identifies it;
    once it is gone, the kernel keeps the id reserved as long as any member of the group
    lives, so the group's survivors are the replica's.

    Args:
        pgid: The replica's pid (= its process group id).
        start_time: The replica's recorded start time.

    Returns:
        False when the id now belongs to an unrelated process.
    """
    st = read_stat(pgid)
    if st is None or st.dead:
        return True
    return start_time is None or st.start_time == start_time


def stop_groups(groups: Iterable[tuple[int, int | None]], grace: float) -> None:
    """Stops process groups: SIGTERM, then SIGKILL for those still alive after ``grace``.

    Blocks until every group is gone or was sent SIGKILL (and had a moment to die).

    Args:
        groups: ``(pgid, leader start time)`` pairs; groups whose id was reused are skipped.
        grace: Seconds between SIGTERM and SIGKILL.
    """
    live = [pg for pg, st in groups if group_is_ours(pg, st) and signal_group(pg, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [pg for pg in live if group_alive(pg)]
    for pg in live:
        signal_group(pg, signal.SIGKILL)
    deadline = time.monotonic() + DRAIN_AFTER_KILL_S
    while live and time.monotonic() < deadline:
        live = [pg for pg in live if group_alive(pg)]
        if live:
            time.sleep(0.01)


def stop_pids(pids: Iterable[int], grace: float, reap: Callable[[], None]) -> None:
    """Stops processes: SIGTERM, then SIGKILL for those still alive after ``grace``.

    Meant for a parent's own children (the supervisor's reparented orphans): ``reap`` collects
    those that exited, so they stop counting as alive. Blocks until every process is gone or
    was sent SIGKILL (and had a moment to die, and was reaped).

    Args:
        pids: The processes.
        grace: Seconds between SIGTERM and SIGKILL.
        reap: Reaps exited children.
    """
    live = list(pids)
    for p in live:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        reap()
        live = [p for p in live if pid_alive(p)]
    for p in live:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    time.sleep(0.01)
    reap()
