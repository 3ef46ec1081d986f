"""Following every followed ``local_cwd`` app with one scan of the state directory.

Each read ``stat`` s the ``state.json`` of every followed app (no process, no parsing) and
re-reads only the records that changed; an unfinished app whose record did not change is
checked for a dead supervisor (a ``/proc`` read), the one change its record cannot show.
One view per state directory; one thread scans it for every subscriber of the process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.local.state import is_valid_app_id
from tether.schedulers.watch.events import FollowTarget, WatchKey

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
        self.reads = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver scans every interval).

        Args:
            wake: Unused.
        """

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
        return out

    def _read(self, app_id: str, stamp: tuple[int, int, int]) -> DescribeAppResponse | None:
        self.reads += 1
        record = self._scheduler.store.load(app_id)
        resp = self._scheduler.describe(app_id)
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
        """Nothing to stop."""


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
    if not isinstance(scheduler, LocalScheduler):
        raise TypeError(f"not a local_cwd scheduler: {type(scheduler).__name__}")
    base = scheduler.store.root.parent
    key = WatchKey(scheduler.backend, str(base))

    def make_reader() -> StateDirReader:
        return StateDirReader(LocalScheduler(scheduler.session_name, state_dir=base))

    return FollowTarget(key, make_reader, scheduler.capabilities.follow.interval)
