"""Placement timeouts of a failover list: an attempt left unplaced moves to the next candidate.

A chain (see :mod:`tether.runner.chains`) run on an ordered list of schedulers with a
``RecoveryPolicy(placement_timeout_s=T)`` gives each candidate but the last ``T`` seconds to
place its attempt: to give it its nodes, so that it runs. An attempt still unplaced after
that (:func:`unplaced`: pending, e.g. a pod no node can take, a Slurm job queued behind a
down partition, a Batch job ``RUNNABLE`` in a full queue) is moved on in three steps, each
recorded in the chain's journal before it is acted on, under the chain's lock:

1. **withdraw**: the intent is recorded (``Attempt.withdrawing``), then the attempt is
   cancelled where it waits;
2. **confirm**: the follower waits until a direct read of that scheduler says the attempt is
   terminal (two attempts never run at once);
3. **move**: when it ended CANCELLED, the refusal is recorded on the attempt (its
   ``refused``, its job's handle in ``withdrawn``) with the next candidate as its scheduler,
   and the follower submits it there, under the same attempt number and job key. An attempt
   that was placed meanwhile and ended otherwise (it ran and succeeded, or failed) is settled
   as any attempt is.

A follower killed between two steps is replaced by one that resumes from the journal: it
cancels a ``withdrawing`` attempt again (cancel is idempotent) and goes on. Attempt N's
clock starts when its job is recorded (``Attempt.submitted_at``, wall-clock seconds, so that
it outlives the follower); an attempt seen placed once (``Attempt.placed``) is never timed
out.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.specs import AppState, AppStatus

if TYPE_CHECKING:
    from tether.runner.journal import Chain
    from tether.specs import RecoveryPolicy

log = logging.getLogger(__name__)

UNPLACED_STATES = frozenset({AppState.UNSUBMITTED, AppState.SUBMITTED, AppState.PENDING})
"""App states in which a job may still be waiting for its nodes."""


def unplaced(status: AppStatus) -> bool:
    """Whether a job still waits to be placed: it is pending, and it has no replicas yet or
    one of them has no host (a job whose every replica has its node, e.g. pulling its image,
    is placed).

    Args:
        status: The job's status, read from its scheduler.

    Returns:
        True when it is unplaced.
    """
    if status.state not in UNPLACED_STATES:
        return False
    replicas = [r for role in status.roles for r in role.replicas]
    return not replicas or any(
        r.state in UNPLACED_STATES and not r.hostname.strip() for r in replicas
    )


def next_candidate(chain: Chain) -> str | None:
    """The candidate after the current attempt's scheduler (None: it is the last)."""
    candidates = chain.candidates
    sched = chain.current.scheduler or chain.scheduler
    rest = candidates[candidates.index(sched) + 1 :] if sched in candidates else []
    return rest[0] if rest else None


def seconds_left(chain: Chain, policy: RecoveryPolicy | None, now: float) -> float | None:
    """Seconds until the current attempt's placement timeout (<= 0: past it), or None when
    no timeout applies: no timeout in the policy, the attempt not submitted, seen placed,
    ended, being withdrawn, on the last candidate, or the chain cancelled or over.

    Args:
        chain: The chain, as the journal records it.
        policy: The app's recovery policy.
        now: The wall clock.

    Returns:
        The seconds, or None.
    """
    timeout = policy.placement_timeout_s if policy is not None else None
    cur = chain.current
    if (
        timeout is None or chain.done or chain.cancelled or cur.handle is None
        or cur.placed or cur.withdrawing or cur.state is not None
        or next_candidate(chain) is None
    ):  # fmt: skip
        return None
    started = cur.submitted_at if cur.submitted_at is not None else now
    return started + timeout - now


def withdraw(chain: Chain, policy: RecoveryPolicy) -> None:
    """Records the intent to withdraw the current attempt (the caller saves, then cancels).

    Args:
        chain: The chain (changed in place).
        policy: The app's recovery policy (its timeout, for the log).
    """
    cur = chain.current
    cur.withdrawing = True
    log.info("attempt %d of %s not placed on %s within %gs; cancelling it there to try %s",
             cur.attempt, chain.chain_key, cur.scheduler or chain.scheduler,
             policy.placement_timeout_s, next_candidate(chain))  # fmt: skip


def move_on(chain: Chain, status: AppStatus, policy: RecoveryPolicy | None) -> bool:
    """Settles a withdrawn attempt now terminal: moves it to the next candidate when it
    ended CANCELLED (and the chain was not cancelled meanwhile), else leaves it to be
    settled as any attempt (the caller saves either way).

    Args:
        chain: The chain (changed in place).
        status: The withdrawn attempt's final status, read from its scheduler.
        policy: The app's recovery policy.

    Returns:
        True when the attempt moved to the next candidate (to be submitted there).
    """
    cur = chain.current
    cur.withdrawing = False
    nxt = next_candidate(chain)
    if status.state != AppState.CANCELLED or chain.cancelled or nxt is None:
        return False
    sched = cur.scheduler or chain.scheduler
    timeout = policy.placement_timeout_s if policy is not None else None
    within = f" within {timeout:g}s" if timeout is not None else ""
    cur.refused.append(f"{sched}: not placed{within} (placement timeout; {cur.handle} cancelled)")
    if cur.handle is not None:
        cur.withdrawn.append(cur.handle)
    cur.handle, cur.submitted_at, cur.placed, cur.scheduler = None, None, False, nxt
    return True


def withdrawing_status(chain: Chain, where: str) -> AppStatus:
    """The logical job's status while its attempt is withdrawn: PENDING, moving on.

    Args:
        chain: The chain.
        where: Where the attempt is (``attempt N on SCHEDULER (earlier: ...)``).

    Returns:
        The status.
    """
    return AppStatus(
        AppState.PENDING,
        msg=f"{where}: not placed in time; cancelling it there to submit it to "
        f"{next_candidate(chain)}",
    )
