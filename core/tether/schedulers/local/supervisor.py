"""The per-app supervisor of ``local_cwd``: starts the replicas, tees their logs, reaps them.

``LocalScheduler.schedule`` starts one supervisor per app, forked by the supervisor host
(:mod:`tether.schedulers.local.host`, which calls :func:`serve`) or as its own process::

    python -m tether.schedulers.local.supervisor <state.json> [--ready-fd N]

The supervisor detaches (it forks once more, so it is nobody's child and survives the
launcher), runs in its own session (a terminal's Ctrl-C never reaches it) and:

* starts every replica as a subprocess in its own process group (in the supervisor's
  session: see :func:`~tether.schedulers.local.attempts.spawn`), with stdin from
  ``/dev/null`` and stdout/stderr piped back;
* tees each stream into ``stdout.log``/``stderr.log`` (raw bytes) and ``combined.log``
  (whole lines), keeping a time index next to each (see
  :class:`~tether.schedulers.local.logindex.LogIndexWriter`);
* reaps exit codes, applies the roles' retry policies, and writes the app's record
  atomically after every change;
* on SIGTERM (a cancel) stops every replica: SIGTERM to each process group, SIGKILL after the
  grace period;
* is a child subreaper, so processes that escape their replica's group are reparented to it
  and stopped when the app ends;
* exits once the app reached a final state. It writes ``R`` to ``--ready-fd`` as soon as
  it claimed the app (its pid and every replica's intent in its record, fsync'ed right
  after, before it starts the replicas), or when it found the app ended or claimed by
  another supervisor. From the claim on, the app is this process's: readers see it
  ``SUBMITTED`` (its replicas ``PENDING``) until the record confirms the replicas started,
  a cancel signals this process (which then starts no more replicas), and its death is
  seen and recovered.

When a replica's main process exits, what is left of its process group is stopped, as a
container runtime stops a container whose main process exited.

This module holds the app's policy (starts, retries, cancel, failing, the record); one run of
a replica's process is an :class:`~tether.schedulers.local.attempts.Attempt`, and a failed
replica's message comes from :mod:`tether.schedulers.local.failures`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import mmap
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

from tether.schedulers.local.attempts import Attempt, StartError, spawn, track
from tether.schedulers.local.gates import Gates
from tether.schedulers.local.limits import ensure_fd_limit
from tether.schedulers.local.logfiles import exhausted_reason
from tether.schedulers.local.procsetup import configure_logging, set_child_subreaper
from tether.schedulers.local.proctable import (
    DRAIN_AFTER_KILL_S,
    descendants,
    pid_alive,
    start_time_of,
    stop_groups,
    stop_pids,
)
from tether.schedulers.local.records import APP_RETRIES_KEY, AppRecord, ReplicaRecord, app_from_json
from tether.schedulers.local.state import StateStore
from tether.schedulers.local.status import (
    CANCEL,
    FAIL,
    RESTART,
    STOP_RANK,
    app_final_state,
)
from tether.schedulers.retries import application_retries
from tether.specs import AppState, RetryPolicy, Role

log = logging.getLogger("tether.local_supervisor")

READ_CHUNK = 1024 * 1024
"""Bytes read from a replica's pipe at a time."""
SAVE_RETRY_S = 1.0
"""After a failed write of the app's record, how long until the next try."""
CONFIRM_SYNC_S = 0.1
"""The confirmation record is flushed to disk this many seconds after it was written (a
replica that ends sooner is recorded final first, and the app needs no flush)."""


# ---- the supervisor ----------------------------------------------------------------------


class Supervisor:
    """Runs one app to completion (see the module docs).

    The record is read by :meth:`claim`, once, under the app's lock.

    Args:
        state_path: The app's ``state.json``.
        ready_fd: A pipe to write ``R`` to once the app is claimed (or -1).
    """

    def __init__(self, state_path: Path, ready_fd: int = -1) -> None:
        app_dir = state_path.parent
        self.state_path = state_path
        self.store = StateStore(app_dir.parent.parent.parent)
        self.app_id = app_dir.name
        self.ready_fd = ready_fd
        self.sel = selectors.DefaultSelector()
        self.attempts: dict[tuple[str, int], Attempt] = {}
        self.by_pid: dict[int, Attempt] = {}
        self.restart_pending: set[tuple[str, int]] = set()
        self.cancelling = False
        self.failing: str | None = None
        self.signals: list[int] = []
        self.secret_values: set[str] = set()
        self.save_error = ""
        self.save_retry_at = 0.0
        self.sync_due: float | None = None  # when the confirmation must be flushed
        self.restart_delayed = ""  # why the pending restarts wait (out of a resource)
        self.restart_retry_at = 0.0
        self._wake_r, self._wake_w = os.pipe()
        # what a pipe read goes into: anonymous memory, whose pages come with the first read
        # that reaches them (most replicas' output fits in one), not a megabyte zeroed at start
        self.buf = mmap.mmap(-1, READ_CHUNK)
        self.base_env = dict(os.environ)  # the launcher's: what every replica starts from
        self.log_dirs: set[str] = set()  # log directories made by the first start
        self.gates = Gates(app_dir)  # none, unless a test holds this app at its steps
        self.dirty = False  # the record changed since it was last written
        self.rec: AppRecord  # set by claim()
        self.roles: dict[str, Role]

    # -- signals --------------------------------------------------------------------------
    def install_signals(self) -> None:
        """Routes SIGTERM/SIGINT (cancel), SIGHUP (ignored) and SIGCHLD into the event loop."""
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD]
        if hasattr(signal, "SIGXFSZ"):
            sigs.append(signal.SIGXFSZ)  # a file size limit: EFBIG from write, not death
        for sig in sigs:
            # handlers, not SIG_IGN: exec() resets handlers, so the replicas get defaults
            signal.signal(sig, self._on_signal)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)

    def _handle_signals(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        while self.signals:
            sig = self.signals.pop(0)
            if sig in (signal.SIGTERM, signal.SIGINT):
                self._cancel(f"cancelled (the supervisor got {signal.Signals(sig).name})")

    def _take_cancel(self) -> None:
        """Acts on a SIGTERM/SIGINT received so far (a cancel) at once; every signal stays
        queued for :meth:`_handle_signals` (the event loop's, which also reaps on SIGCHLD)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            if sig in self.signals:
                self._cancel(f"cancelled (the supervisor got {signal.Signals(sig).name})")

    # -- state ----------------------------------------------------------------------------
    def _note_start_times(self) -> None:
        """Records the start time of each attempt started since the last save.

        Read here, after a batch of starts, not at each fork: right after the ``exec``,
        reading a child's ``/proc/<pid>/stat`` waits on the child loading its program (about
        a quarter of a millisecond each). A child is not reaped before this runs, so its
        entry is still there, also when it already exited.
        """
        for att in self.attempts.values():
            rep = att.rep
            if rep.start_time is None and rep.pid is not None:
                rep.start_time = start_time_of(rep.pid)

    def _save(self, fsync: bool = False) -> None:
        """Writes the record; a failure (a full disk) is retried later, never fatal."""
        self._note_start_times()
        self.dirty = False
        try:
            with self.store.lock(self.app_id):
                self.store.save(self.rec, fsync=fsync)
        except (OSError, MemoryError) as e:
            why = exhausted_reason(e) if isinstance(e, MemoryError) else str(e)
            if not self.save_error:
                log.warning("cannot write the record of app %s (%s); retrying", self.app_id, why)
            self.save_error = why
            self.save_retry_at = time.monotonic() + SAVE_RETRY_S
            return
        if self.save_error:
            log.info("the record of app %s is written again", self.app_id)
        self.save_error = ""

    def _sync_soon(self) -> None:
        """Has :meth:`_step` flush the record ``CONFIRM_SYNC_S`` from now.

        A replica that ends sooner is reaped without waiting for the disk; its final record
        then replaces the confirmation (final records are not fsync'ed: see
        :meth:`StateStore.save`). The intent, which recovery needs, was flushed before the
        replicas started.
        """
        if not self.save_error:
            self.sync_due = time.monotonic() + CONFIRM_SYNC_S

    def _sync(self) -> None:
        self.sync_due = None
        try:
            self.store.sync(self.app_id)
        except OSError as e:  # the record stands (renamed); only its durability is missing
            log.warning("cannot flush the record of app %s: %s", self.app_id, e)

    def _signal_ready(self) -> None:
        if self.ready_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.ready_fd, b"R")
            with contextlib.suppress(OSError):
                os.close(self.ready_fd)
            self.ready_fd = -1

    # -- main -----------------------------------------------------------------------------
    def claim(self) -> bool:
        """Claims the app: its record read under the app's lock, this process's pid and every
        replica's intent written into it.

        Returns:
            False when the app ended or another supervisor claimed it (then ``R`` was
            signalled and this supervisor has nothing to do).

        Raises:
            FileNotFoundError: When the app has no record.
        """
        with self.store.lock(self.app_id):
            # read under the lock only: a cancel may have finished the app before we started
            rec = self.store.load(self.app_id)
            if rec is None:
                raise FileNotFoundError(f"no local_cwd app record at {self.state_path}")
            self.rec = rec
            # load() checked the app
            self.roles = {r.name: r for r in app_from_json(rec.app, check=False).roles}
            if rec.app_state.is_terminal() or rec.supervisor_pid is not None:
                # ended, or claimed by another supervisor (a launcher that gave up on the
                # supervisor host started one itself): at most one supervisor per app
                self._signal_ready()
                return False
            self.rec.supervisor_pid = os.getpid()
            self.rec.supervisor_start_time = start_time_of(os.getpid())
            self.rec.supervisor_sid = os.getsid(0)
            for rep in self.rec.replicas:
                rep.launching = True
            # the pid and the intent first: from the rename on others can tell whether this
            # supervisor lives, and find what it starts (see procs.recover)
            self.store.save(self.rec)
        return True

    def run(self) -> int:
        """Supervises the claimed app (see :meth:`claim`) until it ends.

        Returns:
            The process exit code (0 unless the supervisor itself failed).
        """
        # the app is this supervisor's now: the launcher may return (readers see it PENDING
        # until the confirmation below; a cancel from now on reaches this process). The claim
        # is made durable before any replica starts; the launcher need not wait for that,
        # since a crash of the host that could lose it ends the launcher too
        self._signal_ready()
        self.store.sync(self.app_id)
        self.gates.hold("claimed")
        for rep in self.rec.replicas:
            self._take_cancel()  # a cancel that came in meanwhile: start no more replicas
            if self.failing or self.cancelling:
                break
            self._start(rep)
        self.gates.hold("started")
        if self.failing or self.cancelling:
            for rep in self.rec.replicas:
                if rep.app_state == AppState.PENDING:
                    rep.state = AppState.CANCELLED.name
        for rep in self.rec.replicas:
            rep.launching = False
        if not self.rec.app_state.is_terminal():
            self.rec.state = AppState.RUNNING.name
        self._progress()
        self._save()  # confirmed: every started replica's pid and start time...
        self._sync_soon()  # ...flushed to disk a little later, off the job's way
        log.info("app %s: %d replica(s) started", self.app_id, len(self.attempts))
        while not self._done():
            try:
                self._step()
            except MemoryError:  # the replicas keep running; the next step tries again
                log.warning("app %s: %s; retrying", self.app_id, exhausted_reason(MemoryError()))
                time.sleep(SAVE_RETRY_S)
        self._stop_descendants()
        self._save()
        while self.save_error:  # the final record must land: wait for space
            if not self.store.app_dir(self.app_id).is_dir():
                # the app's directory was deleted (the state dir removed): nowhere to write
                log.warning("app %s: its directory is gone; the final record is not written",
                            self.app_id)
                break
            time.sleep(SAVE_RETRY_S)
            self._save()
        log.info("app %s ended %s", self.app_id, self.rec.state)
        return 0

    def _step(self) -> None:
        now = time.monotonic()
        deadlines = [
            t for a in self.attempts.values() for t in (a.kill_at, a.close_at) if t is not None
        ]
        timeout = min([1.0, *(max(0.0, t - now) for t in deadlines)])
        if self.sync_due is not None:
            if now >= self.sync_due:
                self._sync()
            else:
                timeout = min(timeout, self.sync_due - now)
        events = self.sel.select(timeout)
        woken = not events  # a timeout: look at everything
        for key, _ in events:
            if key.data is None:
                woken = True  # a signal (SIGCHLD, SIGTERM) arrived
            else:
                att, pump = key.data
                att.read(pump, self.buf, self.sel)
        if woken or any(not a.pumps for a in self.attempts.values()):
            self._handle_signals()
            self._reap()
        self._tick()
        if self.dirty and not self._ends_now():
            self._save()  # the replicas that ended in this step, in one record
        self._progress()
        if self.save_error and time.monotonic() >= self.save_retry_at:
            self._save()

    def _done(self) -> bool:
        """Whether the app ended and none of its processes is left to reap."""
        return self.rec.app_state.is_terminal() and not self.attempts

    def _ends_now(self) -> bool:
        """Whether the app ends with this step, with no process left to stop: its final
        record, written right after (see :meth:`run`), then also records the replicas'
        ends. Where a process is left (one that escaped its replica's group), they are
        written first, and the app's end once that process is stopped."""
        if self.attempts or self.restart_pending:
            return False
        try:
            os.waitpid(-1, os.WNOHANG)  # reaps an exited orphan, if there is one
        except ChildProcessError:
            return True  # no child at all, hence no descendant
        return False

    # -- replicas -------------------------------------------------------------------------
    def _start(self, rep: ReplicaRecord) -> bool:
        """Starts (another attempt of) a replica.

        Returns:
            False when it was not started: the app failed, or (for a restart) the supervisor
            is out of a resource and tries again later (``restart_retry_at``).
        """
        step = f"{rep.role}-{rep.replica_id}"
        self.gates.hold(f"spawn-{step}")
        now = time.time()
        try:
            proc, files = spawn(rep, self.roles.get(rep.role), self.base_env, self.app_id,
                                self.log_dirs, self.secret_values,
                                self.gates.before_exec(f"exec-{step}"))
        except StartError as e:
            if e.exhausted and rep.attempts > 0:
                # the replicas that run keep running; this restart waits for the resource
                reason = exhausted_reason(e.error)
                if rep.msg != f"waiting to restart: {reason}":
                    log.warning("app %s: cannot restart %s[%d] yet: %s; retrying every %.0fs",
                                self.app_id, rep.role, rep.replica_id, reason, SAVE_RETRY_S)
                rep.msg = f"waiting to restart: {reason}"
                self.restart_delayed = reason
                self.restart_retry_at = time.monotonic() + SAVE_RETRY_S
                return False
            rep.state = AppState.FAILED.name
            rep.exit_code = None
            rep.finished_at = now
            rep.msg = e.message(rep)
            self._fail(rep.msg)
            return False
        marker = None
        if rep.attempts > 0:
            delayed = f"; delayed: {self.restart_delayed}" if self.restart_delayed else ""
            marker = (
                f"restarting {rep.role}[{rep.replica_id}] (start {rep.attempts + 1}; "
                f"restart {self.rec.num_restarts} of the app{delayed})"
            )
        self.gates.hold(f"spawned-{step}")
        att = track(rep, proc, files, self.sel, now, marker)
        self.attempts[att.key] = att
        self.by_pid[proc.pid] = att
        return True

    def _reap(self) -> None:
        self._note_start_times()  # before a child's /proc entry goes with it
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            att = self.by_pid.pop(pid, None)
            if att is None:
                continue  # an orphan reparented to us (we are a subreaper)
            code = os.waitstatus_to_exitcode(status)
            att.returncode = code
            att.proc.returncode = code
            now = time.monotonic()
            if att.kill_at is None and att.signal(signal.SIGTERM):
                # the main process exited: stop what is left of its group
                att.kill_at = now + self.rec.grace_period
            if att.pumps and att.close_at is None:
                att.close_at = now + self.rec.grace_period + DRAIN_AFTER_KILL_S

    def _tick(self) -> None:
        now = time.monotonic()
        for att in list(self.attempts.values()):
            if att.kill_at is not None and now >= att.kill_at and not att.killed:
                att.signal(signal.SIGKILL)
                att.killed = True
                att.close_at = min(att.close_at or float("inf"), now + DRAIN_AFTER_KILL_S)
            if att.close_at is not None and now >= att.close_at and att.returncode is not None:
                for pump in list(att.pumps.values()):
                    att.close_pump(pump, self.sel, time.time())
            if att.returncode is not None and not att.pumps:
                self._attempt_done(att)

    def _stop(self, att: Attempt, reason: str) -> None:
        if att.stop_reason is None or STOP_RANK[reason] > STOP_RANK[att.stop_reason]:
            att.stop_reason = reason
        if att.kill_at is None:
            att.signal(signal.SIGTERM)
            att.kill_at = time.monotonic() + self.rec.grace_period

    def _attempt_done(self, att: Attempt) -> None:
        del self.attempts[att.key]
        att.record_end(time.time(), self.secret_values)
        if att.rep.state == AppState.FAILED.name:
            self._on_failure(att.rep)
        self.dirty = True  # written once per step (see _step)

    def _on_failure(self, rep: ReplicaRecord) -> None:
        if self.cancelling or self.failing:
            return
        role = self.roles.get(rep.role)
        policy = RetryPolicy(role.retry_policy) if role else RetryPolicy.APPLICATION
        if policy == RetryPolicy.APPLICATION:  # the app's budget (see tether.schedulers.retries)
            budget = application_retries(self.roles.values()) if role else 0
            key = APP_RETRIES_KEY
        else:
            budget = role.max_retries if role else 0
            key = f"{rep.role}/{rep.replica_id}" if policy == RetryPolicy.REPLICA else rep.role
        used = self.rec.retries_used.get(key, 0)
        if used >= budget:
            if budget:
                self._fail(f"{rep.msg}\n(no retries left: max_retries={budget} were used)")
            else:
                self._fail(rep.msg)
            return
        self.rec.retries_used[key] = used + 1
        self.rec.num_restarts += 1
        if policy == RetryPolicy.REPLICA:
            targets = {(rep.role, rep.replica_id)}
        elif policy == RetryPolicy.ROLE:
            targets = {(r.role, r.replica_id) for r in self.rec.replicas if r.role == rep.role}
        else:
            targets = {(r.role, r.replica_id) for r in self.rec.replicas}
        log.info(
            "app %s: %s; retry %d of %d (%s policy) restarts %s",
            self.app_id, rep.msg.splitlines()[0], used + 1, budget, policy.value, sorted(targets),
        )
        self.restart_pending |= targets
        for key_ in targets:
            att = self.attempts.get(key_)
            if att is not None:
                self._stop(att, RESTART)

    def _fail(self, msg: str) -> None:
        if self.failing or self.cancelling:
            return
        self.failing = msg
        self.rec.msg = msg
        for att in self.attempts.values():
            self._stop(att, FAIL)
        self._drop_pending("not restarted because another replica failed")

    def _cancel(self, reason: str) -> None:
        if self.cancelling or self.rec.app_state.is_terminal():
            return
        self.cancelling = True
        self.rec.msg = reason
        for att in self.attempts.values():
            self._stop(att, CANCEL)
        self._drop_pending("cancelled")

    def _drop_pending(self, msg: str) -> None:
        for rep in self.rec.replicas:
            key = (rep.role, rep.replica_id)
            if key in self.restart_pending and key not in self.attempts:
                rep.state = AppState.CANCELLED.name
                rep.msg = msg
        self.restart_pending.clear()

    def _progress(self) -> None:
        if self.rec.app_state.is_terminal():
            return
        if (
            self.restart_pending
            and not any(k in self.attempts for k in self.restart_pending)
            and time.monotonic() >= self.restart_retry_at
        ):
            todo = [r for r in self.rec.replicas if (r.role, r.replica_id) in self.restart_pending]
            for rep in todo:
                rep.launching = True
            self._save(fsync=True)  # intent, before any fork
            started: set[tuple[str, int]] = set()
            for rep in todo:
                if not self._start(rep):
                    break  # the app failed, or out of a resource: the rest wait too
                started.add((rep.role, rep.replica_id))
            for rep in todo:
                rep.launching = False
            self.restart_pending -= started
            if not self.restart_pending:
                self.restart_delayed = ""
            self._save(fsync=True)  # confirmed
        if self.attempts or self.restart_pending:
            return
        final = app_final_state(
            (r.app_state for r in self.rec.replicas), self.cancelling, bool(self.failing)
        )
        if final == AppState.FAILED and not self.failing:
            bad = [f"{r.role}[{r.replica_id}]={r.state}" for r in self.rec.replicas]
            self.rec.msg = self.rec.msg or f"replicas ended unsuccessfully: {', '.join(bad)}"
        self.rec.state = final.name
        self.rec.finished_at = time.time()

    def crashed(self, error: BaseException) -> None:
        """Best effort after an internal error: stops every replica and records FAILED.

        Args:
            error: What went wrong.
        """
        groups = [
            (a.rep.pid, a.rep.start_time) for a in self.attempts.values() if a.rep.pid is not None
        ]
        stop_groups(groups, self.rec.grace_period)
        for rep in self.rec.replicas:
            if not rep.app_state.is_terminal():
                rep.state = AppState.FAILED.name
                rep.msg = rep.msg or "stopped: the supervisor failed"
        self.rec.state = AppState.FAILED.name
        self.rec.msg = f"the supervisor (pid {os.getpid()}) failed: {error!r}"
        self.rec.finished_at = time.time()
        with contextlib.suppress(OSError):
            self._save()
        self._signal_ready()

    def _stop_descendants(self) -> None:
        """Stops processes that escaped their replica's group and were reparented to us."""
        try:
            os.waitpid(-1, os.WNOHANG)  # reaps an exited orphan, if there is one
        except ChildProcessError:
            return  # no child at all, hence no descendant (the common case: no /proc scan)
        live = [p for p in descendants(os.getpid()) if pid_alive(p)]
        if not live:
            self._reap()
            return
        log.info("app %s: stopping leftover processes %s", self.app_id, live)
        stop_pids(live, self.rec.grace_period, self._reap)


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: ``python -m tether.schedulers.local.supervisor STATE_JSON``.

    Ends the process (with ``os._exit``, right after the final record is written).

    Args:
        argv: Arguments (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(prog="python -m tether.schedulers.local.supervisor")
    parser.add_argument("state", help="the app's state.json")
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument(
        "--no-detach", action="store_true", help="do not fork into the background"
    )
    args = parser.parse_args(argv)
    if not args.no_detach and os.fork() != 0:
        os._exit(0)  # the launcher reaps this parent; the child is nobody's child
    serve(Path(args.state), args.ready_fd)


def serve(state_path: Path, ready_fd: int = -1) -> NoReturn:
    """Supervises the app of ``state_path`` in this process, then ends the process.

    Called by :func:`main` and in a process forked by the supervisor host
    (:mod:`tether.schedulers.local.host`).

    Args:
        state_path: The app's ``state.json``.
        ready_fd: Gets ``R`` once the app is claimed (or -1).
    """
    configure_logging()  # done already in a fork of the supervisor host
    sup = Supervisor(state_path, ready_fd)
    sup.install_signals()
    set_child_subreaper()
    if not sup.claim():
        sys.stderr.flush()
        os._exit(0)
    ensure_fd_limit(len(sup.rec.replicas))
    try:
        code = sup.run()
    except Exception as e:
        log.exception("supervisor of app %s crashed", sup.app_id)
        sup.crashed(e)
        code = 1
    # the final record is written: exit now, without the interpreter's teardown, because
    # waiters (``wait_for_change``) take this process's exit as the app's end
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
