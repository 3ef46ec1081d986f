"""The re-attach rule as the ledger feeds it, and the kill rule, as tables (see
tether.adapters.airflow.attempts; the rule itself: tests/runner/test_reattach.py)."""

from __future__ import annotations

import pytest

from tether.adapters.airflow.attempts import (
    AirflowAdapterError,
    Ledger,
    check_reattach,
    decide,
    kill_cancels_job,
)
from tether.runner.reattach import Action
from tether.specs import AppState, AppStatus


def _ledger(recorded: bool = False, handle: str | None = "local_cwd://tether/a") -> Ledger:
    return Ledger("k1", launched_by=1, owner=1, scheduler="local_cwd", app_handle=handle,
                  recorded=recorded)


@pytest.mark.parametrize(
    ("state", "recorded", "mode", "action"),
    [
        (AppState.RUNNING, False, "auto", Action.ATTACH),
        (AppState.PENDING, True, "auto", Action.ATTACH),
        (AppState.SUCCEEDED, False, "auto", Action.ATTACH),   # the worker died: adopt
        (AppState.SUCCEEDED, True, "auto", Action.LAUNCH),    # cleared after success
        (AppState.FAILED, False, "auto", Action.LAUNCH),      # a retry
        (AppState.CANCELLED, True, "auto", Action.LAUNCH),
        (AppState.SUCCEEDED, True, "always", Action.ATTACH),
        (AppState.FAILED, True, "always", Action.LAUNCH),
        (AppState.UNKNOWN, True, "auto", Action.ATTACH),      # never two jobs for one try
        (AppState.RUNNING, False, "never", Action.LAUNCH),
        (AppState.SUCCEEDED, False, "never", Action.LAUNCH),
    ],
)
def test_decide(state: AppState, recorded: bool, mode: str, action: Action) -> None:
    assert decide(_ledger(recorded), AppStatus(state), mode, 2).action == action


def test_never_cancels_a_job_an_earlier_try_left_running() -> None:
    d = decide(_ledger(), AppStatus(AppState.RUNNING), "never", 2)
    assert d.cancel_previous == "local_cwd://tether/a"
    assert decide(_ledger(), AppStatus(AppState.FAILED), "never", 2).cancel_previous is None


def test_no_ledger_or_unknown_job_launches() -> None:
    assert decide(None, None, "always", 1).action == Action.LAUNCH
    assert decide(_ledger(), None, "always", 2).action == Action.LAUNCH


def test_ledger_round_trips_and_ignores_garbage() -> None:
    led = _ledger(recorded=True)
    assert Ledger.from_json(led.to_json()) == led
    assert Ledger.from_json({"nope": 1}) is None
    assert Ledger.from_json("x") is None


@pytest.mark.parametrize(
    ("state", "owner", "deferred", "cancel"),
    [
        ("failed", 1, False, True),         # mark failed
        ("success", 1, False, True),        # mark success
        ("running", 1, False, True),        # the worker shuts down
        ("restarting", 1, False, False),    # cleared while running
        (None, 1, False, False),            # cleared
        ("failed", 2, False, False),        # a newer try owns the job
        ("unknown", 1, False, True),
        (None, None, True, False),          # a deferred task cleared
        ("deferred", None, True, False),    # ... and its new try deferred again
        ("failed", None, True, True),
    ],
)
def test_kill_rule(state: str | None, owner: int | None, deferred: bool, cancel: bool) -> None:
    assert kill_cancels_job(state, owner, 1, deferred=deferred)[0] is cancel


def test_bad_reattach_value_names_the_field_and_the_choices() -> None:
    with pytest.raises(AirflowAdapterError) as e:
        check_reattach("alway", "train")
    msg = str(e.value)
    assert "reattach='alway'" in msg and "'auto', 'always', 'never'" in msg
    assert "did you mean 'always'" in msg
