"""One attempt of a ``local_cwd`` replica: its process started, its pipes pumped, its end recorded.

The supervisor (:mod:`tether.schedulers.local.supervisor`) decides when a replica starts and
what its end means for the app (retries, failing, cancelling); this module does the work of
one run of the replica's process:

* :func:`spawn` makes the replica's log directory and log files, builds its environment
  (secrets resolved now, passed to the process only) and starts the process in its own
  process group, or raises :class:`StartError` naming the step that failed;
* :func:`track` hands the process's stdout/stderr pipes to pumps registered with the
  supervisor's selector and records the start in the replica's record; :meth:`Attempt.read`
  tees what a pipe delivers into the logs;
* :meth:`Attempt.record_end` records, once the process was reaped and its pipes drained, its
  exit code, state and message (with the output that was dropped or split, if any).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.schedulers.local.failures import failure_message
from tether.schedulers.local.logfiles import (
    EXHAUSTED,
    OUT_OF_MEMORY,
    RESTART_MARKER,
    LogFile,
    Pump,
    exhausted_reason,
)
from tether.schedulers.local.proctable import group_is_ours, signal_group
from tether.schedulers.local.records import ReplicaRecord
from tether.schedulers.local.secretfiles import resolve_secrets
from tether.schedulers.local.state import APP_TOKEN_ENV, private_dirs
from tether.schedulers.local.status import exited_state
from tether.specs import AppState, Role
from tether.specs.secrets import mask_text

if TYPE_CHECKING:
    from tether.schedulers.local.logfiles import ReadBuffer

PIPE_SIZE = 1024 * 1024
"""Capacity asked for the replicas' pipes (fewer wake-ups for chatty replicas; Linux only)."""


@dataclass
class Attempt:
    """One run of a replica's process."""

    rep: ReplicaRecord
    proc: subprocess.Popen[bytes]
    combined: LogFile
    files: list[LogFile] = field(default_factory=list)
    pumps: dict[int, Pump] = field(default_factory=dict)
    returncode: int | None = None
    stop_reason: str | None = None
    kill_at: float | None = None
    killed: bool = False
    close_at: float | None = None
    split_lines: int = 0  # lines of combined.log split for want of memory

    @property
    def key(self) -> tuple[str, int]:
        """``(role, replica id)``."""
        return (self.rep.role, self.rep.replica_id)

    def signal(self, sig: int) -> bool:
        """Sends ``sig`` to the replica's process group, unless its id was reused.

        Args:
            sig: The signal.

        Returns:
            True if the group exists (the signal was delivered).
        """
        pid = self.rep.pid
        if pid is None or not group_is_ours(pid, self.rep.start_time):
            return False
        return signal_group(pid, sig)

    def read(self, pump: Pump, buf: ReadBuffer, sel: selectors.BaseSelector) -> None:
        """Hands what one of the attempt's pipes holds to its pump; at EOF, closes the pump.

        Args:
            pump: The pipe's pump.
            buf: Where the read goes (the supervisor's one buffer).
            sel: The supervisor's selector.
        """
        try:  # into the one buffer: reading allocates nothing (even out of memory)
            n = os.readv(pump.rfd, [buf])
        except OSError:
            n = 0
        if n:
            pump.feed(buf, n, time.time())
        else:
            self.close_pump(pump, sel, time.time())

    def close_pump(self, pump: Pump, sel: selectors.BaseSelector, now: float) -> None:
        """Stops reading one of the attempt's pipes (at EOF, or after a kill).

        Args:
            pump: The pipe's pump.
            sel: The supervisor's selector (the pipe is unregistered).
            now: The current time (``time.time()``).
        """
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(pump.rfd)
        pump.finish(now)
        self.split_lines += pump.split_lines
        self.pumps.pop(pump.rfd, None)

    def record_end(self, now: float, secrets: Iterable[str]) -> None:
        """Records the attempt's end in its replica's record: exit code, state and message.

        Args:
            now: The current time (``time.time()``).
            secrets: Values known to be secret (masked in a failure's stderr excerpt).
        """
        self.combined.close()
        rep = self.rep
        lost = {f.path: f.total_dropped for f in self.files if f.total_dropped}
        errors = sorted({f.error for f in self.files if f.total_dropped})
        code = self.returncode if self.returncode is not None else -signal.SIGKILL
        rep.exit_code = code
        rep.finished_at = now
        state, msg = exited_state(code, self.stop_reason)
        rep.state = state.name
        if state == AppState.FAILED:
            rep.msg = failure_message(rep, code, secrets)
        elif msg:
            rep.msg = msg
        if lost:
            rep.dropped_log_bytes += sum(lost.values())
            note = (
                f"{sum(lost.values())} bytes of log output were dropped ({'; '.join(errors)}): "
                + ", ".join(f"{os.path.basename(p)} {n}" for p, n in sorted(lost.items()))
            )
            rep.msg = f"{rep.msg}\n{note}" if rep.msg else note
        if self.split_lines:
            note = f"{self.split_lines} line(s) of combined.log were split: {OUT_OF_MEMORY}"
            rep.msg = f"{rep.msg}\n{note}" if rep.msg else note


class StartError(TetherError):
    """A replica's process could not be started.

    Args:
        what: The step that failed (``start 'train.py' in '/work'``, ``read its secrets``...).
        error: What it raised.
    """

    def __init__(self, what: str, error: OSError | ValueError | MemoryError) -> None:
        super().__init__(what, error)
        self.what = what
        self.error = error

    @property
    def exhausted(self) -> bool:
        """Whether the supervisor ran out of a resource (memory, file descriptors, processes)."""
        e = self.error
        return isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno in EXHAUSTED)

    def message(self, rep: ReplicaRecord) -> str:
        """The replica's failure message (masked).

        Args:
            rep: The replica.

        Returns:
            ``role 'r' replica 0 could not <what>: <why>``.
        """
        e = self.error
        detail: str = str(e)
        if isinstance(e, OSError):
            detail = e.strerror or detail
            if self.what == "read its secrets" and e.filename:
                detail += f" ({e.filename})"
        if self.exhausted:
            detail = exhausted_reason(e)
        return mask_text(
            f"role {rep.role!r} replica {rep.replica_id} could not {self.what}: {detail}"
        )


def spawn(
    rep: ReplicaRecord,
    role: Role | None,
    base_env: dict[str, str],
    app_id: str,
    log_dirs: set[str],
    secret_values: set[str],
    before_exec: Callable[[], None] | None = None,
) -> tuple[subprocess.Popen[bytes], list[LogFile]]:
    """Starts a replica's process (one attempt), with its log files open.

    Args:
        rep: The replica.
        role: Its role (None when the record names an unknown role).
        base_env: The environment every replica starts from (the launcher's).
        app_id: The app (added to the app token of the environment when it has none).
        log_dirs: Log directories made by the first start (updated); a restart makes its
            directory again (it may have been deleted).
        secret_values: Gets the values of the role's secrets (to mask them later).
        before_exec: What the forked child runs before its ``exec`` (a test's gate, see
            :mod:`~tether.schedulers.local.gates`; None for every user's app).

    Returns:
        The process (stdout and stderr piped) and its logs: stdout, stderr, combined.

    Raises:
        StartError: When a step failed (the log files opened are closed).
    """
    what = f"start {rep.argv[0]!r} in {rep.cwd!r}"
    files: list[LogFile] = []
    try:  # out of memory anywhere here: as out of file descriptors
        for d in {os.path.dirname(p) for p in (rep.stdout, rep.stderr, rep.combined)}:
            if rep.attempts or d not in log_dirs:  # a restart: made again if deleted
                what = f"make its log directory {d!r}"
                private_dirs(d)
                log_dirs.add(d)
        what = f"start {rep.argv[0]!r} in {rep.cwd!r}"
        # the streams' own logs appear with their first byte (most replicas write one
        # stream only, and a create costs more than the rest of a start); the combined
        # log, the one followers wait for, at once
        files = [LogFile(rep.stdout, lazy=True), LogFile(rep.stderr, lazy=True),
                 LogFile(rep.combined)]
        env = {**base_env, **rep.env}
        env[APP_TOKEN_ENV] = os.environ.get(APP_TOKEN_ENV) or app_id
        if role is not None and role.secrets:
            # read now, passed to the process only: never in the record or a log
            what = "read its secrets"
            resolved = resolve_secrets(role.secrets)
            env.update(resolved)
            secret_values.update(v for v in resolved.values() if v)
            what = f"start {rep.argv[0]!r} in {rep.cwd!r}"
        proc = subprocess.Popen(
            rep.argv,
            cwd=rep.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # its own group, in the supervisor's session: a fork not yet exec'ed carries the
            # environment of the supervisor's process, which, forked by the supervisor host,
            # lacks the app's token; the session (recorded at the claim) finds it after a
            # crash (see procs.app_processes)
            process_group=0,
            close_fds=True,
            preexec_fn=before_exec,  # None but for a test's gate
        )
    except (OSError, ValueError, MemoryError) as e:
        for f in files:
            f.close()
        raise StartError(what, e) from e
    return proc, files


def track(
    rep: ReplicaRecord,
    proc: subprocess.Popen[bytes],
    files: list[LogFile],
    sel: selectors.BaseSelector,
    now: float,
    marker: str | None = None,
) -> Attempt:
    """Makes the attempt of a process :func:`spawn` started and records its start.

    Args:
        rep: The replica.
        proc: Its process.
        files: Its logs (stdout, stderr, combined).
        sel: The supervisor's selector: gets the pipes, with ``(attempt, pump)`` as data.
        now: The start time (``time.time()``).
        marker: For a restart, what to note in ``stderr.log`` and ``combined.log`` (after
            :data:`~tether.schedulers.local.logfiles.RESTART_MARKER`) before any output.

    Returns:
        The attempt.
    """
    out, err, comb = files
    assert proc.stdout is not None and proc.stderr is not None
    if marker is not None:  # before any of its output: the pipes are read from below on
        line = f"{RESTART_MARKER}{marker}\n".encode()
        err.write(line, now)
        comb.write(line, now)
    att = Attempt(rep, proc, comb, [out, err, comb])
    for pipe, logf in ((proc.stdout, out), (proc.stderr, err)):
        rfd = os.dup(pipe.fileno())
        pipe.close()
        if hasattr(fcntl, "F_SETPIPE_SZ"):
            with contextlib.suppress(OSError):  # above the user's limit: keep the default
                fcntl.fcntl(rfd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        pump = Pump(rfd, logf, comb)
        att.pumps[rfd] = pump
        sel.register(rfd, selectors.EVENT_READ, (att, pump))
    rep.pid = proc.pid
    rep.start_time = None  # read with the supervisor's next save (see its _note_start_times)
    rep.attempts += 1
    rep.state = AppState.RUNNING.name
    rep.exit_code = None
    rep.started_at = now
    rep.finished_at = None
    rep.msg = ""
    return att
