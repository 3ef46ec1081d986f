"""What ``RetryPolicy.APPLICATION`` means, on every backend that restarts applications.

When a replica of a role whose policy is ``APPLICATION`` fails, the whole app is restarted
(every replica of every role), as long as the app was restarted fewer than
:func:`application_retries` times so far: the largest ``max_retries`` among its
``APPLICATION`` roles. The budget is the app's, counted for the app whichever role failed,
so roles may give different values (the default ``max_retries=0`` of a role that does not
care does not take the budget another role asked for). ``REPLICA`` and ``ROLE`` roles keep
their own budgets.

This is the budget a backend with one restart counter per job can honour (AWS Batch's
``retryStrategy.attempts``, a Slurm batch script's restart loop), and the one TorchX's AWS
Batch scheduler applies (the largest of the roles' values).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from tether.specs import RetryPolicy


class RetrySettings(Protocol):
    """What a role (a :class:`~tether.specs.Role`, or a backend's record of one) tells."""

    @property
    def max_retries(self) -> int:
        """The role's retry budget."""
        ...

    @property
    def retry_policy(self) -> RetryPolicy | str:
        """The role's retry policy."""
        ...


def application_retries(roles: Iterable[RetrySettings]) -> int:
    """The app's budget of ``APPLICATION`` restarts (see the module docs).

    Args:
        roles: The app's roles.

    Returns:
        The largest ``max_retries`` of the ``APPLICATION`` roles (0 without one).
    """
    return max(
        [r.max_retries for r in roles if RetryPolicy(r.retry_policy) == RetryPolicy.APPLICATION]
        + [0]
    )
