"""Following every followed ``local_cwd`` app with one scan of the state directory.

Each read ``stat`` s the ``state.json`` of every followed app (no process, no parsing) and
re-reads only the records that changed; an unfinished app whose record did not change is
checked for a dead supervisor (a ``/proc`` read), the one change its record cannot show.
One view per state directory; one thread scans it for every subscriber of the process.

An app's end is heard at once, not at the next scan: a supervisor writes the app's final
state and then exits, and one more thread waits on a pidfd of every followed app's
supervisor (one ``poll`` for all of them) and wakes the scan when one exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.local.state import is_valid_app_id
from tether.schedulers.watch.events import FollowTarget, view_target

if TYPE_CHECKING:
    from tether.schedulers.local.records import AppRecord

@dataclass
class _Seen:
    """An app's record as last read: its file's identity, the record and its description."""

    stamp: tuple[int, int, int]
    record: AppRecord | None
    response: DescribeAppResponse


class StateDirReader:
    """Scans a state directory for the followed apps (see the module docs).

    Args:
        scheduler: A scheduler of that state directory (its ``describe`` reads a record).
    """

    def __init__(self, scheduler: LocalScheduler) -> None:
        self._scheduler = scheduler
        self._seen: dict[str, _Seen] = {}
        self._exits = ExitWaker()
        self.reads = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Starts waiting for the followed apps' supervisors to exit.

        Args:
            wake: Called when one exits (the driver then scans at once).
        """
        self._exits.start(wake)

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """One scan.

        Args:
            app_ids: The followed apps.

        Returns:
            The apps whose records exist.
        """
        from tether.schedulers.local.procs import supervised

        self._seen = {a: s for a, s in self._seen.items() if a in app_ids}
        out: dict[str, DescribeAppResponse] = {}
        for app_id in app_ids:
            if not is_valid_app_id(app_id):
                continue
            try:
                st = os.stat(self._scheduler.store.state_path(app_id))
            except FileNotFoundError:
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            seen = self._seen.get(app_id)
            if seen is not None and seen.stamp == stamp:
                rec = seen.record
                if rec is None or rec.app_state.is_terminal() or supervised(rec):
                    out[app_id] = seen.response
                    continue
            resp = self._read(app_id, stamp)
            if resp is not None:
                out[app_id] = resp
        self._exits.watch(
            (s.record.supervisor_pid, s.record.supervisor_start_time)
            for s in self._seen.values()
            if s.record is not None and s.record.supervisor_pid is not None
            and not s.record.app_state.is_terminal()
        )  # fmt: skip
        return out

    def _read(self, app_id: str, stamp: tuple[int, int, int]) -> DescribeAppResponse | None:
        self.reads += 1
        record = self._scheduler.store.load(app_id)
        resp = self._scheduler.describe_loaded(app_id, record)
        if resp is None:
            self._seen.pop(app_id, None)
            return None
        self._seen[app_id] = _Seen(stamp, record, resp)
        return resp

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """Reads one app's record.

        Args:
            app_id: The app.

        Returns:
            Its description, or None when it has no record.
        """
        if not is_valid_app_id(app_id):
            return None
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Stops waiting for supervisors."""
        self._exits.stop()


class ExitWaker:
    """Calls ``wake`` when one of the watched processes exits: a pidfd each, one thread.

    Without pidfds (Linux before 5.3) it watches nothing and the scan alone hears ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[tuple[int, int | None], int] = {}
        self._wake: Callable[[], None] | None = None
        self._poke_r, self._poke_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self, wake: Callable[[], None]) -> None:
        """Starts the waiting thread.

        Args:
            wake: Called (from the thread) when a watched process exits.
        """
        if not hasattr(os, "pidfd_open"):
            return
        self._wake = wake
        self._thread = threading.Thread(target=self._run, name="tether-local-exits",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def watch(self, procs: Iterable[tuple[int, int | None]]) -> None:
        """Sets the processes to watch (by pid and start time; others are forgotten).

        Args:
            procs: ``(pid, start time)`` pairs.
        """
        if self._thread is None:
            return
        from tether.schedulers.local.proctable import pid_alive

        wanted = set(procs)
        changed = False
        with self._lock:
            for key in [k for k in self._fds if k not in wanted]:
                os.close(self._fds.pop(key))
                changed = True
            for key in wanted - self._fds.keys():
                try:
                    fd = os.pidfd_open(key[0])
                except OSError:  # gone already (the scan sees it), or no pidfds here
                    continue
                if not pid_alive(*key):  # checked after opening: the pid was not reused
                    os.close(fd)
                    self._wake_up()
                    continue
                self._fds[key] = fd
                changed = True
        if changed:
            self._poke()

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._poke_w, b"x")

    def _run(self) -> None:
        while not self._stopped:
            poller = select.poll()
            poller.register(self._poke_r, select.POLLIN)
            with self._lock:
                by_fd = {fd: key for key, fd in self._fds.items()}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            ready = [fd for fd, _ in poller.poll()]
            if self._poke_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self._poke_r, 4096)
            ended = [by_fd[fd] for fd in ready if fd in by_fd]
            if ended:
                with self._lock:
                    for key in ended:
                        if key in self._fds:
                            os.close(self._fds.pop(key))
                self._wake_up()

    def stop(self) -> None:
        """Stops the thread and closes every pidfd."""
        self._stopped = True
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
        for fd in (self._poke_r, self._poke_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the scheduler's state directory.

    Args:
        scheduler: A :class:`LocalScheduler`.
        app_id: The app (every app of the directory shares the view).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    def make_reader(s: LocalScheduler) -> StateDirReader:
        return StateDirReader(LocalScheduler(s.session_name, state_dir=s.store.root.parent))

    return view_target(scheduler, LocalScheduler, lambda s: str(s.store.root.parent), make_reader)
