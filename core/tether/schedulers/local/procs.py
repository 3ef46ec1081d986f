"""Waiting on local processes (pidfd where the kernel has it)."""

from __future__ import annotations

import logging
import os
import select
import time

from tether.schedulers.local.supervisor import (
    pid_alive,
)

log = logging.getLogger(__name__)

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


# ---- helpers: reading logs ---------------------------------------------------------------
