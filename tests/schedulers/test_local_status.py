"""The local backend's one table: how a replica process's end becomes an AppState."""

from __future__ import annotations

import signal

import pytest

from tether.schedulers.local.status import (
    CANCEL,
    FAIL,
    RESTART,
    STOP_RANK,
    app_final_state,
    exited_state,
    orphaned_state,
)
from tether.specs import AppState

S, F, C = AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED


@pytest.mark.parametrize(
    ("code", "stop", "state", "msg"),
    [
        (0, None, S, ""),
        (1, None, F, ""),
        (-signal.SIGKILL, None, F, ""),
        (0, RESTART, AppState.PENDING, "stopped for a restart"),
        (-signal.SIGTERM, RESTART, AppState.PENDING, "stopped for a restart"),
        (-signal.SIGTERM, CANCEL, C, "cancelled"),
        (0, CANCEL, S, ""),  # it finished its work before the stop reached it
        (-signal.SIGTERM, FAIL, C, "stopped because another replica failed"),
    ],
)
def test_exited_state(code: int, stop: str | None, state: AppState, msg: str) -> None:
    assert exited_state(code, stop) == (state, msg)


def test_a_cancel_overrides_the_other_stops() -> None:
    assert STOP_RANK[CANCEL] > STOP_RANK[FAIL] > STOP_RANK[RESTART]


@pytest.mark.parametrize(
    ("replicas", "cancelled", "failing", "state"),
    [
        ([S, S], False, False, S),
        ([S, F], False, False, F),
        ([S, C], False, False, F),
        ([S, S], True, False, C),
        ([S, S], False, True, F),
        ([], False, False, S),
    ],
)
def test_app_final_state(
    replicas: list[AppState], cancelled: bool, failing: bool, state: AppState
) -> None:
    assert app_final_state(replicas, cancelled, failing) == state


def test_orphaned_replicas() -> None:
    assert orphaned_state(cancelled=True) == C
    assert orphaned_state(cancelled=False) == F
