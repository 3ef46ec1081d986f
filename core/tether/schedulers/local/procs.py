"""Local processes of apps: waiting on them (pidfd), cancelling them, finding them after a crash.

Crash consistency of ``local_cwd`` rests on two facts:

* the supervisor writes its pid (fsync'ed, atomic rename) before it starts any replica, and
  records each replica's intent before forking it and its pid + start time after;
* every process of an app carries the app's id in ``$TETHER_LOCAL_APPS`` (the launcher sets
  it on the supervisor; forks, ``exec`` and descendants inherit it), so a process forked by a
  supervisor that was killed before it could record the pid is still found, by a scan of
  ``/proc/*/environ``;
* except where ``/proc`` shows no token: a supervisor forked by the supervisor host shows the
  host's environment (set at the host's ``exec``), and so does each fork of it until its own
  ``exec``. Those run in the app's session, which the claim records (``supervisor_sid``),
  and carry the supervisor's name; the scan finds them by both.

:func:`recover` is what ``status``/``cancel`` (and ``Scheduler.reconcile``) call for an
unfinished app: when its supervisor is gone it stops every process of the app (recorded
process groups, start times guarding against pid reuse, plus the scan) and records the
app's final state. :func:`cancel_app` (``cancel``) has the supervisor stop the app, or does so
itself when the supervisor is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Iterable

from tether.schedulers.local.proctable import (
    ProcStat,
    all_stats,
    pid_alive,
    read_stat,
    stop_groups,
)
from tether.schedulers.local.records import AppRecord
from tether.schedulers.local.state import APP_TOKEN_ENV, SUPERVISOR_NAME, StateStore
from tether.schedulers.local.status import app_final_state, orphaned_state
from tether.specs import AppState

log = logging.getLogger(__name__)

LAUNCH_TIMEOUT_S = 120.0
"""Without a recorded launcher (records of older versions), how long an app may wait for
its supervisor before it counts as dead."""
DEAD_SUPERVISOR_GRACE_S = 1.0
"""Grace period for the processes a dead supervisor left behind."""
CANCEL_EXTRA_WAIT_S = 10.0
"""Beyond the grace period, how long ``cancel`` waits for the supervisor to stop the app."""
_TOKEN = APP_TOKEN_ENV.encode() + b"="


def with_app_token(env: dict[str, str], app_id: str) -> dict[str, str]:
    """``env`` with ``app_id`` added to :data:`APP_TOKEN_ENV` (kept: outer apps' ids).

    Args:
        env: An environment (not changed).
        app_id: The app.

    Returns:
        A new environment.
    """
    out = dict(env)
    ids = [i for i in out.get(APP_TOKEN_ENV, "").split(":") if i]
    if app_id not in ids:
        ids.append(app_id)
    out[APP_TOKEN_ENV] = ":".join(ids)
    return out


def _carries(pid: int, app_id: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return False
    for entry in data.split(b"\0"):
        if entry.startswith(_TOKEN) and app_id in entry[len(_TOKEN) :].split(b":"):
            return True
    return False


def _in_session(st: ProcStat, sid: int | None) -> bool:
    """Whether ``st`` is a host-forked supervisor, or a fork of it not yet exec'ed, of the
    app whose supervisor ran in session ``sid``.

    The app's session leader (the supervisor's first fork) exited at once: a live process
    with the session's id, or one that leads the session, means the id was reused, and
    only a process with the supervisor's name counts.
    """
    if sid is None or st.sid != sid or st.pid == sid or pid_alive(sid):
        return False
    try:
        with open(f"/proc/{st.pid}/comm", "rb") as f:
            return f.read().strip() == SUPERVISOR_NAME
    except OSError:
        return False


def app_processes(app_id: str, sid: int | None = None) -> list[ProcStat]:
    """The live processes of an app (not this one): those carrying ``app_id`` in
    :data:`APP_TOKEN_ENV`, and those of its supervisor's session ``sid`` that cannot.

    Finds the app's supervisor (while it starts, too), processes it forked and had not yet
    recorded (also before their ``exec``), replicas and their descendants, also those that
    left the replica's process group. A process that cleared its environment and left the
    session escapes (documented limit).

    Args:
        app_id: The app.
        sid: The session of its supervisor (``AppRecord.supervisor_sid``), when known.

    Returns:
        The processes (empty without /proc).
    """
    me = os.getpid()
    key = app_id.encode()
    return [
        s
        for s in all_stats()
        if s.pid != me and not s.dead and (_carries(s.pid, key) or _in_session(s, sid))
    ]


def kill_processes(procs: Iterable[ProcStat], grace: float) -> None:
    """SIGTERM, then SIGKILL after ``grace``, to processes known by pid and start time.

    Args:
        procs: The processes (a pid now naming another process is left alone).
        grace: Seconds between SIGTERM and SIGKILL.
    """

    def same(p: ProcStat) -> bool:
        st = read_stat(p.pid)
        return st is not None and not st.dead and st.start_time == p.start_time

    live = [p for p in procs if same(p)]
    for p in live:
        with contextlib.suppress(OSError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [p for p in live if same(p)]
    for p in live:
        with contextlib.suppress(OSError):
            os.kill(p.pid, signal.SIGKILL)


def stop_app_processes(rec: AppRecord, grace: float) -> None:
    """Stops every process the app may have: recorded groups, then whatever carries its id.

    Repeats the scan until it comes back empty (a process may fork while being stopped).

    Args:
        rec: The app's record.
        grace: Seconds between SIGTERM and SIGKILL.
    """
    groups = [
        (r.pid, r.start_time)
        for r in rec.replicas
        if r.pid is not None and not r.app_state.is_terminal()
    ]
    stop_groups(groups, grace)
    for _ in range(20):
        found = app_processes(rec.app_id, rec.supervisor_sid)
        if not found:
            return
        log.info("app %s: stopping unrecorded processes %s", rec.app_id, [p.pid for p in found])
        kill_processes(found, grace)
        grace = 0.0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(pid_alive(p.pid, p.start_time) for p in found):
            time.sleep(0.01)
    log.warning("app %s: processes keep appearing; gave up stopping them", rec.app_id)


def supervised(rec: AppRecord) -> bool:
    """Whether an unfinished app's supervisor runs (or may still be starting).

    Before the supervisor records its pid, the app counts as supervised while the launcher
    lives or any process carries the app's id (the supervisor starting up). So an app whose
    launcher and supervisor both died is detected at once, not after a timeout.

    Args:
        rec: The app's record.

    Returns:
        False when nobody will ever finish the app.
    """
    if rec.supervisor_pid is not None:
        return pid_alive(rec.supervisor_pid, rec.supervisor_start_time)
    if rec.launcher_pid is None:  # a record of an older tether
        return time.time() - rec.created < LAUNCH_TIMEOUT_S
    if pid_alive(rec.launcher_pid, rec.launcher_start_time):
        return True
    return bool(app_processes(rec.app_id))


def mark_unsupervised(rec: AppRecord, cancelled: bool = False) -> None:
    """Records, in memory only, the outcome of an app whose supervisor is gone.

    ``describe`` shows an app so (a read); :func:`resolve_unsupervised` also stops its
    processes and the caller saves the record.

    Args:
        rec: The record (changed in place).
        cancelled: Record the app CANCELLED (a cancel) rather than FAILED.
    """
    now = time.time()
    if rec.supervisor_pid is None:
        why = "the supervisor never started"
    else:
        why = f"supervisor pid {rec.supervisor_pid} died"
    for rep in rec.replicas:
        rep.launching = False
        if rep.app_state.is_terminal():
            continue
        rep.state = orphaned_state(cancelled).name
        if cancelled:
            rep.msg = "cancelled"
        else:
            rep.msg = f"{why}; exit status of replica unknown"
            rep.exit_code = None
        rep.finished_at = now
    final = app_final_state((r.app_state for r in rec.replicas), cancelled=cancelled)
    rec.state = final.name
    if final == AppState.CANCELLED:
        rec.msg = "cancelled"
        if rec.supervisor_pid is not None:
            rec.msg += f" (its supervisor pid {rec.supervisor_pid} had died)"
    elif final == AppState.FAILED:
        rec.msg = f"{why} (see {rec.supervisor_log}); the app's processes are stopped"
    rec.finished_at = now


def resolve_unsupervised(rec: AppRecord, cancelled: bool = False) -> None:
    """Finishes an app whose supervisor is gone: stops its processes, records why.

    The caller holds the app's lock and saves the record.

    Args:
        rec: The record (changed in place).
        cancelled: Record the app CANCELLED (a cancel) rather than FAILED.
    """
    grace = rec.grace_period if cancelled else min(rec.grace_period, DEAD_SUPERVISOR_GRACE_S)
    stop_app_processes(rec, grace)
    mark_unsupervised(rec, cancelled=cancelled)


def recover(store: StateStore, app_id: str, cancelled: bool = False) -> AppRecord | None:
    """Resolves an unfinished app whose supervisor died; a no-op for any other app.

    Takes the app's lock, re-checks, stops every process the app may have (see
    :func:`stop_app_processes`) and saves the final record (FAILED, or CANCELLED for a
    cancel). Safe to call from any process, any number of times.

    Args:
        store: The state store.
        app_id: The app.
        cancelled: Record CANCELLED instead of FAILED.

    Returns:
        The (possibly updated) record, or None when there is no such app.
    """
    rec = store.load(app_id)
    if rec is None or rec.app_state.is_terminal() or supervised(rec):
        return rec
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(store.lock(app_id))
        except FileNotFoundError:
            return None  # deleted meanwhile
        rec = store.load(app_id)
        if rec is None or rec.app_state.is_terminal() or supervised(rec):
            return rec
        # read again now that the supervisor is known to be gone: it may have recorded the
        # app's end between the read above and the check (its last write is its last word)
        rec = store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return rec
        resolve_unsupervised(rec, cancelled=cancelled)
        store.save(rec, fsync=True)
        return rec


def wait_readable(fd: int, timeout: float) -> bool:
    r, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return bool(r)


def wait_pid_exit(pid: int, start_time: int | None, timeout: float) -> bool:
    """Blocks until process ``pid`` exits or ``timeout`` passes.

    Args:
        pid: The process (need not be a child).
        start_time: Its recorded start time (pid reuse guard).
        timeout: The most seconds to wait.

    Returns:
        True if the process is gone.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return True
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                if not pid_alive(pid, start_time):  # checked after opening: no reuse race
                    return True
                return wait_readable(fd, deadline - time.monotonic())
            finally:
                os.close(fd)
    while pid_alive(pid, start_time):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.02, left))
    return True


# ---- cancel -------------------------------------------------------------------------------
def cancel_app(store: StateStore, app_id: str) -> None:
    """Stops every process of the app (children included) and records CANCELLED.

    Signals the supervisor, which stops the replicas' process groups (SIGTERM, SIGKILL
    after the grace period) and records the app CANCELLED. When the supervisor is dead
    or does not finish in time, stops the groups itself.

    Args:
        store: The state store.
        app_id: The app (a finished or unknown app is left alone).
    """
    for _ in range(3):
        rec = store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return
        if rec.supervisor_pid is not None and pid_alive(
            rec.supervisor_pid, rec.supervisor_start_time
        ):
            _stop_supervisor(rec)
            continue
        with store.lock(app_id):
            rec = store.load(app_id)
            if rec is None or rec.app_state.is_terminal():
                return
            if rec.supervisor_pid is not None and pid_alive(
                rec.supervisor_pid, rec.supervisor_start_time
            ):
                continue  # it just started: signal it
            rec = store.load(app_id)  # the supervisor's last write is its last word
            if rec is None or rec.app_state.is_terminal():
                return
            resolve_unsupervised(rec, cancelled=True)
            store.save(rec, fsync=True)
            return


def _stop_supervisor(rec: AppRecord) -> None:
    """SIGTERM to the app's supervisor (it cancels the app), SIGKILL when it does not stop."""
    pid, start = rec.supervisor_pid, rec.supervisor_start_time
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_pid_exit(pid, start, rec.grace_period + CANCEL_EXTRA_WAIT_S):
        return
    log.warning("supervisor pid %d of app %s did not stop; killing it", pid, rec.app_id)
    if pid_alive(pid, start):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_pid_exit(pid, start, 2.0)
