"""Launching a ``local_cwd`` app: its record written, its supervisor started and waited for.

``LocalScheduler.schedule`` makes the app's record (:func:`new_record`) and creates it in the
store, then calls :func:`start_supervisor`: the supervisor host
(:mod:`tether.schedulers.local.host`) forks the app's supervisor, or, when the host is off,
cannot be reached, or its supervisor ended before it claimed the app, the supervisor is started
as its own process (``python -m tether.schedulers.local.supervisor``). Either way the launcher
waits until the supervisor reports that it claimed the app (its pid and the replicas' intent
in the app's record; the supervisor fsyncs it before it starts a replica), not until the
replicas started: from the claim on, whatever happens to the app is
recorded or recovered without the launcher. What to do when the supervisor reports nothing
(stop what it started, record why, raise) is the scheduler's.

Imported by ``schedule`` only: a dryrun needs none of this.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from tether.schedulers.api import JOB_KEY
from tether.schedulers.local import host
from tether.schedulers.local.procs import wait_readable, with_app_token
from tether.schedulers.local.proctable import start_time_of
from tether.schedulers.local.records import AppRecord, ReplicaRecord, app_to_json
from tether.schedulers.local.render import LocalRequest
from tether.schedulers.local.state import HOST_LOG, SUPERVISOR_LOG, StateStore, private_dirs
from tether.specs import AppDef, AppState, CfgVal

SUPERVISOR_START_TIMEOUT_S = 120.0
"""How long ``schedule`` waits for the supervisor to report that it claimed the app."""
SUPERVISOR_EXIT_WAIT_S = 5.0
"""When a claimed supervisor reported nothing, how long ``schedule`` waits for it to be gone
from the process table before it stops it as one that hangs."""


def new_record(
    store: StateStore, req: LocalRequest, app: AppDef, cfg: Mapping[str, CfgVal], session: str
) -> AppRecord:
    """The record of an app about to be launched (every replica PENDING).

    Args:
        store: Where the app's directory will be.
        req: The rendered request.
        app: The app.
        cfg: The resolved run options.
        session: The runner's session.

    Returns:
        The record (not yet written).
    """
    app_dir = store.apps_dir / req.app_id
    job_key = app.metadata.get(JOB_KEY)
    return AppRecord(
        app_id=req.app_id,
        name=app.name,
        session=session,
        created=time.time(),
        job_key=str(job_key) if job_key is not None else None,
        app=app_to_json(app),
        cfg=dict(cfg),
        log_dir=req.log_dir,
        grace_period=req.grace_period,
        supervisor_log=str(app_dir / SUPERVISOR_LOG),
        launcher_pid=os.getpid(),
        launcher_start_time=start_time_of(os.getpid()),
        replicas=[
            ReplicaRecord(
                role=r.role,
                replica_id=r.replica_id,
                argv=list(r.argv),
                env=dict(r.env),
                cwd=r.cwd,
                stdout=r.stdout,
                stderr=r.stderr,
                combined=r.combined,
            )
            for r in req.replicas()
        ],
    )


def start_supervisor(
    store: StateStore, record: AppRecord, app_dir: Path, log_dirs: list[str]
) -> bool:
    """Starts the app's supervisor (forked by the host, else its own process) and waits
    until it reports that it claimed the app (the replicas start after).

    The replicas' log directories are made here while the supervisor starts (on a host
    with more than one core, at the same time): the supervisor makes any that are still
    missing when it starts a replica, so either may come first.

    Args:
        store: The state store (the app's record is in it).
        record: The app's record.
        app_dir: The app's directory (the supervisor's working directory).
        log_dirs: The replicas' log directories.

    Returns:
        Whether the supervisor reported the app claimed (or found it ended) within
        :data:`SUPERVISOR_START_TIMEOUT_S`.

    Raises:
        OSError: When the supervisor's process could not be started (the app is recorded
            FAILED first).
    """
    env = with_app_token(dict(os.environ), record.app_id)
    state_path = store.state_path(record.app_id)
    conn = None
    ready: bytes | bool = b""
    if host.enabled():  # a fork of the supervisor host (see its module docs)
        conn = host.request_supervisor(
            state_path, app_dir, record.supervisor_log, env, store.root / HOST_LOG
        )
    if conn is not None:
        _make_log_dirs(log_dirs)  # while the host forks the supervisor
        try:
            ready = wait_readable(conn.fileno(), SUPERVISOR_START_TIMEOUT_S) and conn.recv(1)
        except OSError:
            ready = b""
        finally:
            conn.close()
        if not ready:
            rec = store.load(record.app_id)
            unclaimed = rec is not None and rec.supervisor_pid is None
            if unclaimed and rec is not None and not rec.app_state.is_terminal():
                # the forked supervisor ended before it claimed the app: start one here
                conn = None
    if conn is None:
        _make_log_dirs(log_dirs)
        ready = _exec_supervisor(store, record, app_dir, state_path, env)
    return bool(ready)


def _exec_supervisor(
    store: StateStore, record: AppRecord, app_dir: Path, state_path: Path, env: dict[str, str]
) -> bytes | bool:
    """Starts the supervisor as its own process; returns what it signalled when ready."""
    import subprocess  # only here: a launch through the host does without it

    ready_r, ready_w = os.pipe()
    try:
        slog_fd = os.open(record.supervisor_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(slog_fd, "ab") as slog:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tether.schedulers.local.supervisor",
                    str(state_path),
                    "--ready-fd",
                    str(ready_w),
                ],
                stdin=subprocess.DEVNULL,
                env=env,
                stdout=slog,
                stderr=subprocess.STDOUT,
                cwd=app_dir,
                start_new_session=True,
                pass_fds=(ready_w,),
            )
    except BaseException:
        os.close(ready_r)
        os.close(ready_w)
        mark_failed(store, record.app_id, "could not start the supervisor process")
        raise
    os.close(ready_w)
    try:
        ready = wait_readable(ready_r, SUPERVISOR_START_TIMEOUT_S) and os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)  # the supervisor forked away at once; reap its first half
    return ready


def _make_log_dirs(log_dirs: Iterable[str]) -> None:
    """Makes the replicas' log directories (private), as far as possible: the supervisor
    makes any that are missing as it starts each replica, and reports a failure there, naming
    the replica."""
    for d in log_dirs:
        try:
            private_dirs(d)
        except OSError:
            return


def mark_failed(store: StateStore, app_id: str, msg: str) -> None:
    """Records an unfinished app, and each of its unfinished replicas, FAILED with ``msg``.

    Args:
        store: The state store.
        app_id: The app (an unknown or finished app is left alone).
        msg: Why.
    """
    with store.lock(app_id):
        rec = store.load(app_id)
        if rec is None or rec.app_state.is_terminal():
            return
        rec.state = AppState.FAILED.name
        rec.msg = msg
        rec.finished_at = time.time()
        for rep in rec.replicas:
            if not rep.app_state.is_terminal():
                rep.state = AppState.FAILED.name
                rep.msg = msg
        store.save(rec)
