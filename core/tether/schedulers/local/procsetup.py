"""What makes a process a ``local_cwd`` supervisor: its name, its log, its orphans.

Each piece is done the same way in every supervisor, so the supervisor host
(:mod:`tether.schedulers.local.host`) does what it can once, before it forks (the log set up,
libc's ``prctl`` looked up), and each fork finds it done.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("tether.local_supervisor")

PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
_PRCTL: list[Callable[..., int] | None] = []


def configure_logging() -> None:
    """Sends the supervisor's log records (INFO and up) to stderr, its log file."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [pid %(process)d] %(message)s",
    )


def libc_prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (None where there is none), looked up once per process.

    Returns:
        The function, or None.
    """
    if not _PRCTL:
        prctl = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                prctl = ctypes.CDLL(None, use_errno=True).prctl
        _PRCTL.append(prctl)
    return _PRCTL[0]


def set_name(name: bytes) -> None:
    """Sets this process's name (``comm``: what ``top`` and ``ps -o comm`` show).

    Args:
        name: The name (cut to 15 bytes).
    """
    prctl = libc_prctl()
    if prctl is not None:
        prctl(PR_SET_NAME, name[:15], 0, 0, 0)


def set_child_subreaper() -> None:
    """Has the processes that escape this one's children reparented to it (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    prctl = libc_prctl()
    if prctl is None or prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("could not become a child subreaper; escaped processes are not tracked")
