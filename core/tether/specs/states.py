"""The states of an application and the retry policies of a role: :class:`AppState`,
:func:`is_terminal`, :class:`RetryPolicy`.

Apart from the statuses (:mod:`tether.specs.status`, which re-exports them) so that a spec
(a role's retry policy) and a dry run do not build the status dataclasses.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class AppState(IntEnum):
    """Lifecycle state of an application (and of each replica)."""

    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.name} ({self.value})"

    def is_terminal(self) -> bool:
        """Whether the state is final (SUCCEEDED, FAILED or CANCELLED)."""
        return is_terminal(self)


_TERMINAL = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


def is_terminal(state: AppState) -> bool:
    """Whether ``state`` is final.

    Args:
        state: The state.

    Returns:
        True for SUCCEEDED, FAILED and CANCELLED.
    """
    return state in _TERMINAL


class RetryPolicy(str, Enum):
    """What restarts when a replica fails and the role has retries left.

    * ``REPLICA``: only the failed replica restarts.
    * ``APPLICATION``: every replica of every role restarts.
    * ``ROLE``: every replica of the failed role restarts.
    """

    REPLICA = "REPLICA"
    APPLICATION = "APPLICATION"
    ROLE = "ROLE"

    def __str__(self) -> str:
        return self.value
