"""The one re-attach rule (tether.runner.reattach), as a table, and the Runner applying it."""

from __future__ import annotations

import pytest

from tether.errors import SpecError
from tether.runner.reattach import Action, EarlierJob, Reattach, decide
from tether.specs import AppState, AppStatus

HANDLE = "local_cwd://tether/a"
A, L = Action.ATTACH, Action.LAUNCH


@pytest.mark.parametrize(
    ("state", "recorded", "mode", "action"),
    [
        # not final: never a second job for one identity
        (AppState.PENDING, False, Reattach.AUTO, A),
        (AppState.RUNNING, True, Reattach.AUTO, A),
        (AppState.UNKNOWN, False, Reattach.AUTO, A),
        (AppState.RUNNING, False, Reattach.ALWAYS, A),
        # SUCCEEDED: adopted unless its outcome was recorded (then a user asked to run anew)
        (AppState.SUCCEEDED, False, Reattach.AUTO, A),
        (AppState.SUCCEEDED, True, Reattach.AUTO, L),
        (AppState.SUCCEEDED, True, Reattach.ALWAYS, A),
        # FAILED / CANCELLED: a retry launches
        (AppState.FAILED, False, Reattach.AUTO, L),
        (AppState.CANCELLED, True, Reattach.AUTO, L),
        (AppState.FAILED, True, Reattach.ALWAYS, L),
        # never: always launch
        (AppState.RUNNING, False, Reattach.NEVER, L),
        (AppState.SUCCEEDED, False, Reattach.NEVER, L),
    ],
)
def test_the_rule(state: AppState, recorded: bool, mode: Reattach, action: Action) -> None:
    earlier = EarlierJob(HANDLE, AppStatus(state), recorded=recorded)
    assert decide(earlier, mode).action == action


def test_nothing_to_follow_launches() -> None:
    assert decide(None).action == L
    assert decide(EarlierJob(HANDLE, None), Reattach.ALWAYS).action == L
    assert decide(EarlierJob(None, AppStatus(AppState.RUNNING))).action == L


def test_never_cancels_a_job_that_is_not_final() -> None:
    running = decide(EarlierJob(HANDLE, AppStatus(AppState.RUNNING)), Reattach.NEVER)
    assert running.cancel_previous == HANDLE
    failed = decide(EarlierJob(HANDLE, AppStatus(AppState.FAILED)), Reattach.NEVER)
    assert failed.cancel_previous is None


def test_a_mode_is_read_from_its_name_and_a_typo_is_named() -> None:
    assert Reattach.parse("always") is Reattach.ALWAYS
    with pytest.raises(SpecError, match=r"reattach='alway' .*did you mean 'always'"):
        Reattach.parse("alway")
