"""Placement timeouts (``tether.runner.placement``): when an attempt counts as unplaced, when
its timeout applies, and how a withdrawn attempt moves to the next candidate.

These are the pure decisions, on the journal's own records. The whole move on real
backends (an unschedulable pod on a real kube-scheduler, a Slurm job pending on a DOWN
partition, both failing over to ``local_cwd``; a follower killed mid-withdrawal) is tested
in ``tests/e2e/test_kubernetes_placement_e2e.py`` and ``tests/e2e/test_slurm_placement_e2e.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.runner.journal import Attempt, Chain
from tether.runner.placement import move_on, next_candidate, seconds_left, unplaced
from tether.specs import AppState, AppStatus, RecoveryPolicy, ReplicaStatus, RoleStatus

S = AppState


def _status(state: AppState, *replicas: tuple[AppState, str]) -> AppStatus:
    reps = [ReplicaStatus(i, st_, "w", hostname=host) for i, (st_, host) in enumerate(replicas)]
    return AppStatus(state, roles=[RoleStatus("w", reps)] if reps else [])


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (_status(S.PENDING), True),  # no pod yet (e.g. a quota that refuses the Job's pods)
        (_status(S.SUBMITTED), True),
        (_status(S.PENDING, (S.PENDING, "")), True),  # a pod no node took
        (_status(S.PENDING, (S.PENDING, "node-1"), (S.PENDING, "")), True),  # half a gang
        (_status(S.PENDING, (S.PENDING, "node-1")), False),  # on its node, pulling its image
        (_status(S.PENDING, (S.RUNNING, ""), (S.SUCCEEDED, "")), False),  # running: placed
        (_status(S.RUNNING, (S.RUNNING, "")), False),
        (_status(S.RUNNING), False),
        (_status(S.SUCCEEDED), False),
        (_status(S.FAILED), False),
        (_status(S.CANCELLED), False),
        (_status(S.UNKNOWN), False),  # never withdrawn on a read that says nothing
    ],
)
def test_unplaced(status: AppStatus, expected: bool) -> None:
    assert unplaced(status) is expected


def _chain(scheduler: str = "kubernetes", **attempt: Any) -> Chain:
    fields: dict[str, Any] = {"handle": f"{scheduler}://s/job", "submitted_at": 100.0,
                              "scheduler": scheduler, **attempt}  # fmt: skip
    return Chain("key", "kubernetes", [Attempt(0, "key/attempt-0", **fields)],
                 schedulers=["kubernetes", "slurm", "local_cwd"])  # fmt: skip


POLICY = RecoveryPolicy(max_recoveries=0, placement_timeout_s=30)


def test_seconds_left_counts_from_the_submission() -> None:
    assert seconds_left(_chain(), POLICY, now=110.0) == 20.0
    assert seconds_left(_chain(), POLICY, now=140.0) == -10.0
    # a job found by its key after a follower died: its clock starts now
    assert seconds_left(_chain(submitted_at=None), POLICY, now=500.0) == 30.0


@pytest.mark.parametrize(
    ("chain", "policy"),
    [
        (_chain(), None),  # no policy
        (_chain(), RecoveryPolicy()),  # no timeout in it
        (_chain("local_cwd"), POLICY),  # the last candidate waits as long as it is kept
        (_chain(handle=None), POLICY),  # not submitted
        (_chain(placed=True), POLICY),  # seen placed once
        (_chain(withdrawing=True), POLICY),  # being withdrawn already
        (_chain(state="FAILED"), POLICY),  # ended
    ],
)
def test_no_timeout_applies(chain: Chain, policy: RecoveryPolicy | None) -> None:
    assert seconds_left(chain, policy, now=1000.0) is None


def test_no_timeout_for_a_cancelled_or_finished_chain() -> None:
    for flag in ("cancelled", "done"):
        chain = _chain()
        setattr(chain, flag, True)
        assert seconds_left(chain, POLICY, now=1000.0) is None


def test_a_cancelled_withdrawal_moves_to_the_next_candidate() -> None:
    chain = _chain(withdrawing=True)
    assert move_on(chain, AppStatus(S.CANCELLED), POLICY)
    cur = chain.current
    assert (cur.scheduler, cur.handle, cur.withdrawing) == ("slurm", None, False)
    assert cur.withdrawn == ["kubernetes://s/job"]
    assert cur.refused == ["kubernetes: not placed within 30s (placement timeout; "
                           "kubernetes://s/job cancelled)"]  # fmt: skip
    assert (cur.submitted_at, cur.placed, cur.attempt) == (None, False, 0)
    assert next_candidate(chain) == "local_cwd"


@pytest.mark.parametrize("state", [S.SUCCEEDED, S.FAILED])
def test_a_withdrawal_that_ran_meanwhile_is_settled_where_it_ran(state: AppState) -> None:
    """Placed between the last read and the cancel, it ran to an end: it stays."""
    chain = _chain(withdrawing=True)
    assert not move_on(chain, AppStatus(state), POLICY)
    cur = chain.current
    assert (cur.scheduler, cur.handle, cur.withdrawing, cur.withdrawn) == (
        "kubernetes", "kubernetes://s/job", False, [])


def test_a_chain_cancelled_during_a_withdrawal_does_not_move() -> None:
    chain = _chain(withdrawing=True)
    chain.cancelled = True
    assert not move_on(chain, AppStatus(S.CANCELLED), POLICY)
    assert chain.current.scheduler == "kubernetes"


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 5), at=st.integers(0, 4),
    timeout=st.floats(0.001, 1e6), submitted=st.floats(0, 1e9), now=st.floats(0, 2e9),
)  # fmt: skip
def test_only_a_candidate_with_one_after_it_is_timed(
    n: int, at: int, timeout: float, submitted: float, now: float
) -> None:
    names = [f"s{i}" for i in range(n)]
    sched = names[min(at, n - 1)]
    chain = Chain("k", names[0], [Attempt(0, "k/attempt-0", handle="h", scheduler=sched,
                                          submitted_at=submitted)], schedulers=names)  # fmt: skip
    left = seconds_left(chain, RecoveryPolicy(placement_timeout_s=timeout), now)
    if sched == names[-1]:
        assert left is None
    else:
        assert left == pytest.approx(submitted + timeout - now)
        assert next_candidate(chain) == names[names.index(sched) + 1]
