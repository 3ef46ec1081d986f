"""Coordination between the replicas of one job: who is rank 0, and a cross-process lock."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from tether.schedulers.replica import ENV_REPLICA_ID

log: logging.Logger = logging.getLogger(__name__)

ENV_RANK = "RANK"

T = TypeVar("T")


def process_rank() -> int | None:
    """This process's rank in its job, when it can be told.

    Returns:
        ``$RANK`` (set by torchrun), else ``$TETHER_REPLICA_ID`` (set by tether schedulers),
        else None (a single process).
    """
    for var in (ENV_RANK, ENV_REPLICA_ID):
        val = os.environ.get(var, "").strip()
        if val.isdigit():
            return int(val)
    return None


def is_rank0() -> bool:
    """True for rank 0, and for a process that is not part of a multi-process job."""
    rank = process_rank()
    return rank is None or rank == 0


@contextlib.contextmanager
def exclusive_lock(
    path: str, timeout: float = 300.0, stale_after: float = 120.0, poll: float = 0.05
) -> Iterator[None]:
    """Holds a lock file (created exclusively) for the duration of the block.

    Works across processes and across machines that share the filesystem. A lock file older
    than ``stale_after`` seconds (its holder died) is broken.

    Args:
        path: The lock file.
        timeout: Seconds to wait for the lock.
        stale_after: Age in seconds after which a lock is considered abandoned.
        poll: Seconds between attempts.

    Raises:
        TimeoutError: When the lock is not acquired within ``timeout``.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                age = time.time() - os.path.getmtime(path)
            except FileNotFoundError:
                continue  # released meanwhile: try again at once
            if age > stale_after:
                log.warning("breaking stale lock %s (%.0fs old)", path, age)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"could not lock {path} within {timeout:.0f}s; if no tether job is "
                    "running, delete the file"
                ) from None
            time.sleep(poll)
            continue
        try:
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        break
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def wait_for(
    probe: Callable[[], T | None], timeout: float, what: str, poll: float = 0.2
) -> T | None:
    """Polls ``probe`` until it returns something other than None.

    Args:
        probe: The check.
        timeout: Seconds to keep trying.
        what: What is awaited, for the log.
        poll: Seconds between tries.

    Returns:
        The first non-None result, or None after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            log.warning("gave up waiting %.0fs for %s", timeout, what)
            return None
        time.sleep(poll)
