"""The supervisor's log files and pipe pumps, and what it says when it runs out of a resource.

Out of disk (``ENOSPC``/``EFBIG``), of file descriptors (``EMFILE``/``ENFILE``) or of memory
(``MemoryError``, ``ENOMEM``): replicas that run keep running, logs drop or split output with
a marker instead of failing, and the user is told why and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from typing import TYPE_CHECKING

from tether.schedulers.local.limits import FDS_PER_REPLICA
from tether.schedulers.local.logindex import LogIndexWriter
from tether.schedulers.local.state import INDEX_SUFFIX

if TYPE_CHECKING:
    import mmap

    ReadBuffer = bytearray | mmap.mmap
    """The supervisor's one read buffer (see :class:`Pump`)."""

log = logging.getLogger("tether.local_supervisor")

MAX_PARTIAL_LINE = 1024 * 1024
"""A line longer than this is split in ``combined.log`` (so memory stays bounded)."""
RESTART_MARKER = "[tether] "
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})
"""Errors of starting a process that mean the supervisor (or the host) ran out of a resource:
a restart waits and tries again instead of failing the app."""
OUT_OF_MEMORY = "the supervisor ran out of memory"


def _rlimit(name: str) -> str:
    try:
        import resource

        soft, hard = resource.getrlimit(getattr(resource, name))
    except (ImportError, AttributeError, OSError, ValueError):
        return "unknown"
    return " / ".join("unlimited" if v == resource.RLIM_INFINITY else str(v) for v in (soft, hard))


def exhausted_reason(e: BaseException) -> str:
    """A clear explanation of a resource error, with what to do about it.

    Args:
        e: The error (``MemoryError``, or an ``OSError``: ``EMFILE``, ``ENFILE``, ``EAGAIN``,
            ``ENOMEM``...).

    Returns:
        The explanation.
    """
    if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM):
        return (
            f"{OUT_OF_MEMORY} (address-space limit (soft / hard) {_rlimit('RLIMIT_AS')} "
            "bytes): free memory on the host or raise the limit (ulimit -v)"
        )
    what = (e.strerror if isinstance(e, OSError) else None) or str(e)
    if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
        limit = _rlimit("RLIMIT_NOFILE")
        if limit == "unknown":
            limit = "open-file limit unknown"
        else:
            soft, _, hard = limit.partition(" / ")
            limit = f"open-file limit {soft}, hard limit {hard}"
        scope = "the host" if e.errno == errno.ENFILE else "the supervisor"
        return (
            f"{scope} ran out of file descriptors ({what}; {limit}; each running replica "
            f"needs about {FDS_PER_REPLICA}): raise the limit (ulimit -n) or run fewer replicas"
        )
    return f"out of resources to start a process ({what})"


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class LogFile:
    """An append-only log file with its time index, that degrades instead of failing.

    A failing write (a full disk, a file size limit, no memory) drops the data and is
    reported once in the supervisor's log; the replica keeps running and its pipe keeps being
    drained: logs are never a reason to kill a job. Every later write tries again (a failing
    write costs one syscall); once one works, a marker line first says how many bytes were
    lost.

    Args:
        path: The log file.
        lazy: Create the file at the first write instead of now (a stream that prints nothing
            costs no file).
    """

    def __init__(self, path: str, lazy: bool = False) -> None:
        self.path = path
        self.dropped = 0  # bytes lost since the last successful write
        self.total_dropped = 0
        self.error = ""
        self.fd = -1
        self.index: LogIndexWriter | None = None
        if not lazy:  # else created by the first write (readers take a missing log as empty)
            self._open()

    def _open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self.index = LogIndexWriter(self.path + INDEX_SUFFIX, os.fstat(self.fd).st_size)
        except (OSError, MemoryError) as e:
            if self.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self.fd)
            self.fd = -1
            self._failed(e, 0)

    def _failed(self, e: OSError | MemoryError, nbytes: int) -> None:
        why = OUT_OF_MEMORY if isinstance(e, MemoryError) else (e.strerror or str(e))
        if not self.error:
            log.warning("cannot write %s (%s); dropping output until it works", self.path,
                        e if isinstance(e, OSError) else why)
        self.error = why
        self.dropped += nbytes
        self.total_dropped += nbytes
        if self.fd >= 0 and self.index is not None:
            with contextlib.suppress(OSError):  # a partial write: index from the real size
                self.index.offset = os.fstat(self.fd).st_size

    def _marker(self) -> bytes:
        return (
            f"\n{RESTART_MARKER}{self.dropped} bytes of output were dropped "
            f"(could not write the log: {self.error})\n"
        ).encode()

    def _append(self, parts: list[bytes | memoryview], now: float) -> None:
        total = sum(len(p) for p in parts)
        if self.index is not None:
            self.index.wrote(total, now)
        n = os.writev(self.fd, parts) if len(parts) > 1 else os.write(self.fd, parts[0])
        for p in parts:  # a short write: the rest, piece by piece (nothing is joined)
            if n >= len(p):
                n -= len(p)
                continue
            _write_all(self.fd, memoryview(p)[n:])
            n = 0

    def write(self, data: bytes | memoryview, now: float, head: bytes = b"") -> None:
        """Appends ``head + data`` (written together, without joining them first)."""
        nbytes = len(head) + len(data)
        if not nbytes:
            return
        if self.fd < 0:
            self._open()  # the first write of a lazy log, or again after a failed open
        if self.fd < 0:
            self.dropped += nbytes
            self.total_dropped += nbytes
            return
        try:
            if self.dropped:
                self._append([self._marker()], now)
                self.dropped = 0
                log.info("writing %s again", self.path)
            self._append([head, data] if head else [data], now)
        except (OSError, MemoryError) as e:
            self._failed(e, nbytes)

    def close(self) -> None:
        if self.dropped and self.fd >= 0:
            with contextlib.suppress(OSError, MemoryError):
                self._append([self._marker()], time.time())
        if self.index is not None:
            self.index.close()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)


class Pump:
    """Copies one pipe of a replica into its stream log and (as whole lines) the combined log.

    The data comes in the supervisor's one read buffer, so pumping allocates nothing but a
    partial line. When even that fails (out of memory), the line is split there instead:
    nothing is lost (``split_lines`` counts it).
    """

    def __init__(self, rfd: int, out: LogFile, combined: LogFile) -> None:
        self.rfd = rfd
        self.out = out
        self.combined = combined
        self.partial = b""
        self.split_lines = 0

    def feed(self, buf: ReadBuffer, n: int, now: float) -> None:
        """Copies ``buf[:n]`` (just read from the pipe) into the logs."""
        view = memoryview(buf)[:n]
        self.out.write(view, now)
        cut = buf.rfind(b"\n", 0, n) + 1
        rest = view[cut:]
        if cut:
            # the line begun earlier, completed by ``data``: one writev, no copy
            self.combined.write(view[:cut], now, head=self.partial)
            self.partial = b""
        if not rest:
            return
        try:
            self.partial += rest
        except MemoryError:  # the supervisor is out of memory: split the line here
            self.combined.write(rest, now, head=self.partial)
            self.combined.write(b"\n", now)
            self.partial = b""
            if not self.split_lines:
                log.warning("%s: %s; a line was split in %s", OUT_OF_MEMORY,
                            exhausted_reason(MemoryError()), self.combined.path)
            self.split_lines += 1
            return
        if len(self.partial) > MAX_PARTIAL_LINE:
            self.combined.write(b"\n", now, head=self.partial)
            self.partial = b""

    def finish(self, now: float) -> None:
        if self.partial:
            self.combined.write(b"\n", now, head=self.partial)
            self.partial = b""
        with contextlib.suppress(OSError):
            os.close(self.rfd)
        self.out.close()
