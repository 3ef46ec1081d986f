"""Open-file limits of the local supervisor: what an app needs and raising the soft limit.

Kept apart from the supervisor so that a dry-run can check an app against the limit without
importing the supervisor.
"""

from __future__ import annotations

import contextlib

FDS_PER_REPLICA = 8
"""File descriptors the supervisor holds per running replica (two pipes, three logs and
their time indexes)."""

FD_BASE = 64
"""File descriptors the supervisor needs besides its replicas' (record, locks, logs)."""


def fd_limit_problem(replicas: int) -> str | None:
    """Why this process's hard open-file limit cannot run ``replicas`` replicas, if it can't.

    The supervisor inherits the limit and raises its soft limit up to the hard one.

    Args:
        replicas: How many replicas the app has.

    Returns:
        The explanation, or None when the limit is enough (or unknown).
    """
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FDS_PER_REPLICA * replicas + FD_BASE
    if hard == resource.RLIM_INFINITY or hard >= need:
        return None
    return (
        f"{replicas} replicas need about {need} open files in the local supervisor "
        f"({FDS_PER_REPLICA} per replica + {FD_BASE}), but the hard open-file limit "
        f"(RLIMIT_NOFILE) is {hard}: raise it (ulimit -Hn) or run fewer replicas"
    )


def ensure_fd_limit(replicas: int) -> None:
    """Raises the soft limit of open files when the app needs more (8 per replica)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 16 * replicas + 256
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
