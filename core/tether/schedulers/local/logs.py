"""Reading replica logs: whole lines, time-indexed ``since``/``until``, tailing."""

from __future__ import annotations

import bisect
import io
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator

from tether.schedulers import interrupt
from tether.schedulers.local.logindex import read_index
from tether.schedulers.local.state import INDEX_SUFFIX

log = logging.getLogger(__name__)

LOG_READ_CHUNK = 4 * 1024 * 1024
"""Bytes read from a log file at a time."""
LOG_POLL_S = 0.1
"""How often a tailing reader looks for new log data."""
MAX_LOG_LINE = LOG_READ_CHUNK
"""A line longer than this is split into pieces of at most two chunks, so a reader's memory
stays bounded whatever the line length (a 200 MB line without newline included)."""


def read_log_lines(
    path: str,
    since: float | None = None,
    until: float | None = None,
    finished: Callable[[], bool] | None = None,
    poll_s: float = LOG_POLL_S,
    wait: Callable[[float], None] | None = None,
) -> Iterator[str]:
    """The lines of a replica's log; each ends with ``\\n``, bad UTF-8 is replaced.

    Reads in large binary chunks and hands out lines in batches (the per-line iteration runs
    in C, so a gigabyte of log reads in seconds). With ``since``/``until`` the log's time
    index (written by the supervisor, 10 ms resolution) gives each line the time its first
    byte was received; the reader seeks close to ``since`` and stops at the first line at or
    after ``until``.

    Args:
        path: The log file.
        since: Only lines received at or after this time (seconds since the epoch).
        until: Only lines received before this time.
        finished: When given, follow the log until it returns True (then drain and stop).
        poll_s: How often to look for new data while following.
        wait: Called as ``wait(poll_s)`` between looks instead of ``time.sleep``; it may
            return early (when the app ends, so a follower sees the end at once).

    Returns:
        An iterator of lines; a follower stops after its next look once its consumer's
        stop is requested (:mod:`tether.schedulers.interrupt`).
    """
    def pause() -> None:
        interrupt.check()
        (wait or time.sleep)(poll_s)
        interrupt.check()

    return itertools.chain.from_iterable(_line_batches(path, since, until, finished, pause))


def _line_batches(
    path: str,
    since: float | None,
    until: float | None,
    finished: Callable[[], bool] | None,
    pause: Callable[[], None],
) -> Iterator[list[str]]:
    f = _open_when_present(path, finished, pause)
    if f is None:
        return
    with f:
        if since is not None or until is not None:
            yield from _timed_batches(f, path + INDEX_SUFFIX, since, until, finished, pause)
        else:
            # binary chunks, decoded in C: bounded memory (unlike readline) at the same speed
            for _, data in _chunks(f, finished, pause):
                yield _decode_lines(data)


def _open_when_present(
    path: str, finished: Callable[[], bool] | None, pause: Callable[[], None]
) -> io.FileIO | None:
    while True:
        try:
            return open(path, "rb", buffering=0)
        except FileNotFoundError:
            if finished is None or finished():
                # a last look: the replica may have written just before it finished
                try:
                    return open(path, "rb", buffering=0)
                except FileNotFoundError:
                    return None
            pause()


def _decode_lines(data: bytes) -> list[str]:
    """Complete lines (``data`` ends with ``\\n``) decoded, each keeping its ``\\n``."""
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
    return text.readlines()


def _chunks(
    f: io.FileIO, finished: Callable[[], bool] | None, pause: Callable[[], None]
) -> Iterator[tuple[int, bytes]]:
    """``(offset, data)`` chunks of whole lines; a last partial line comes last, with
    ``\\n`` added. Follows the file until ``finished`` returns True, if it is given."""
    pos = f.tell()
    carry = b""
    done = False
    while True:
        data = f.read(LOG_READ_CHUNK)
        if data:
            if carry:
                data = carry + data
                carry = b""
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) >= MAX_LOG_LINE:
                    yield pos, data + b"\n"
                    pos += len(data)
                else:
                    carry = data
                continue
            if cut + 1 < len(data):
                carry = data[cut + 1 :]
                data = data[: cut + 1]
            yield pos, data
            pos += len(data)
            continue
        if finished is None or done:
            break
        if finished():
            done = True  # one more read drains what was written before the end
            continue
        pause()
    if carry:
        yield pos, carry + b"\n"


class _LineTimes:
    """The log's time index, reloaded as the log grows."""

    def __init__(self, idx_path: str) -> None:
        self.path = idx_path
        self.offsets: list[int] = []
        self.times: list[float] = []
        self._pos = 0
        self.reload()

    def reload(self) -> None:
        entries, self._pos = read_index(self.path, self._pos)
        for o, t in entries:
            self.offsets.append(o)
            self.times.append(t)

    def first_offset_at(self, when: float | None) -> float:
        """The offset from which on every byte was received at or after ``when``.

        Returns:
            The offset; infinity when no indexed byte is that recent (yet).
        """
        if when is None:
            return float("inf")
        i = bisect.bisect_left(self.times, when)
        return self.offsets[i] if i < len(self.offsets) else float("inf")


def _timed_batches(
    f: io.FileIO,
    idx_path: str,
    since: float | None,
    until: float | None,
    finished: Callable[[], bool] | None,
    pause: Callable[[], None],
) -> Iterator[list[str]]:
    """Lines received in ``[since, until)``: those that start at an offset in ``[S, U)``,
    where S and U are the offsets from which the index dates bytes at ``since``/``until``."""
    if not os.path.exists(idx_path) and os.fstat(f.fileno()).st_size > 0:
        # written without a time index (not by a supervisor): nothing to date lines by
        # (a supervisor writes an entry before the bytes it dates: an empty log has none yet)
        log.warning("log %s has no time index; since/until are ignored", f.name)
        since = until = None
    times = _LineTimes(idx_path)
    skip_partial = False
    if since is not None:
        s0 = times.first_offset_at(since)
        start = int(s0) if s0 != float("inf") else (times.offsets[-1] if times.offsets else 0)
        if start > 0:
            f.seek(start - 1)
            skip_partial = f.read(1) != b"\n"  # that line began earlier: it is too old
        f.seek(start)

    def stop_following() -> bool:
        if until is not None and time.time() >= until:
            return True  # lines written from now on are too new
        return finished is not None and finished()

    follow = stop_following if finished is not None else None
    for pos, data in _chunks(f, follow, pause):
        times.reload()  # entries are written before their bytes: these cover ``data``
        lo = 0
        if skip_partial:
            lo = data.find(b"\n") + 1
            skip_partial = False
        if since is not None:
            s_off = times.first_offset_at(since) - pos
            if s_off >= len(data):
                continue  # every line of this chunk is older than since
            if s_off > lo:
                b = int(s_off)
                lo = b if data[b - 1 : b] == b"\n" else data.find(b"\n", b) + 1
                if lo == 0:
                    continue
        hi = len(data)
        u_off = times.first_offset_at(until) - pos
        if u_off <= 0:
            return
        if u_off < len(data):
            b = int(u_off)
            hi = data.find(b"\n", b - 1) + 1 or len(data)
        if hi > lo:
            yield _decode_lines(data[lo:hi])
        if u_off < len(data):
            return
