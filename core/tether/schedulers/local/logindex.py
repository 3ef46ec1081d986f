"""Time indexes of ``local_cwd`` logs: which byte of a log arrived when.

Each log ``X.log`` may have a sidecar ``X.log.idx`` of fixed-size ``(offset, time)``
entries, written by the supervisor as it appends to the log and read by ``log_iter`` for
``since``/``until``.
"""

from __future__ import annotations

import contextlib
import os
import struct

_ENTRY = struct.Struct("<Qd")
INDEX_RESOLUTION_S = 0.01
"""Time resolution of the log indexes: one entry per write, at most one per 10 ms."""


class LogIndexWriter:
    """Appends ``(byte offset, time)`` entries to a log's ``.idx`` sidecar.

    An entry ``(o, t)`` says that the bytes of the log from offset ``o`` on were received at
    or after ``t``. A line's time is the time of the last entry at or before its first byte.
    Entries are written at most every :data:`INDEX_RESOLUTION_S`, so the index stays tiny
    (16 bytes per entry) even for logs of gigabytes.

    The file is created by the first entry (a log that stays empty has no index; readers
    take a missing index as an empty one), which keeps file creation off a replica's start.

    Args:
        path: The ``.idx`` file (appended to; it survives restarts of a replica).
        offset: The log's current size.
    """

    def __init__(self, path: str, offset: int) -> None:
        self._path = path
        self._fd = -1
        self.offset = offset
        self._last = -1.0

    def wrote(self, nbytes: int, now: float) -> None:
        """Records that ``nbytes`` were appended to the log at ``now``.

        Args:
            nbytes: Bytes just written.
            now: The time they were received.
        """
        if nbytes <= 0:
            return
        if now - self._last >= INDEX_RESOLUTION_S:
            if self._fd < 0:
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._fd, _ENTRY.pack(self.offset, now))
            self._last = now
        self.offset += nbytes

    def close(self) -> None:
        """Closes the index file."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def read_index(path: str, start: int = 0) -> tuple[list[tuple[int, float]], int]:
    """Reads the entries of a log index from byte ``start`` on.

    Args:
        path: The ``.idx`` file.
        start: Byte offset in the index to read from (a multiple of the entry size).

    Returns:
        The entries ``(log offset, time)`` and the index offset to continue from.
    """
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return [], start
    n = len(data) // _ENTRY.size
    entries = [_ENTRY.unpack_from(data, i * _ENTRY.size) for i in range(n)]
    return [(int(o), float(t)) for o, t in entries], start + n * _ENTRY.size
