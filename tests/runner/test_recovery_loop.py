"""The Runner's recovery loop on ``local_cwd`` (real replica processes).

``local_cwd`` has no infrastructure to lose, so the policies here recover from the
``application`` cause (allowed when listed): the loop is the same for every cause. The
replica reads ``TETHER_ATTEMPT`` and keeps its progress under ``TETHER_CHECKPOINT``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.runner import Runner
from tether.runner.recovery import Attempt, Chain, Journal, RecoveringRun, attempts_of
from tether.specs import AppDef, AppState, FailureCause, RecoveryPolicy, Role

SCRIPT = """
import os, pathlib, sys
ckpt = pathlib.Path(os.environ["TETHER_CHECKPOINT"])
ckpt.mkdir(parents=True, exist_ok=True)
attempt = int(os.environ["TETHER_ATTEMPT"])
with open(ckpt / "progress", "a") as f:
    f.write(f"{attempt}\\n")
sys.exit(0 if attempt >= int(sys.argv[1]) else 3)
"""


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner() as r:
        yield r


def _app(tmp_path: Path, succeed_on: int, policy: RecoveryPolicy | None) -> AppDef:
    role = Role("train", image=str(tmp_path), entrypoint=sys.executable,
                args=["-c", SCRIPT, str(succeed_on)])  # fmt: skip
    return AppDef("rec", roles=[role], recovery=policy, checkpoint=str(tmp_path / "ckpt"))


def _jobs(runner: Runner, key: str) -> int:
    sched = runner._scheduler("local_cwd")  # the scheduler's own listing, not the journal
    return len(sched.find_jobs(key))


def test_recovers_until_success_with_backoff_and_attempt_numbers(
    runner: Runner, tmp_path: Path
) -> None:
    policy = RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=1.5,
                            backoff_factor=2)  # fmt: skip
    waits: list[float] = []
    out = RecoveringRun(runner, "chain-a", sleep=waits.append).run(
        _app(tmp_path, 2, policy), "local_cwd", wait_interval=0.2
    )
    assert out.status.state == AppState.SUCCEEDED
    assert [a.attempt for a in out.attempts] == [0, 1, 2]
    assert [a.state for a in out.attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert [a.cause for a in out.attempts] == ["application", "application", None]
    assert (tmp_path / "ckpt" / "progress").read_text() == "0\n1\n2\n"
    assert waits == [1.5, 3.0]
    assert len({a.handle for a in out.attempts}) == 3
    for a in out.attempts:  # exactly one job per attempt
        assert _jobs(runner, a.job_key) == 1


def test_gives_up_after_max_recoveries(runner: Runner, tmp_path: Path) -> None:
    policy = RecoveryPolicy(on=["application"], max_recoveries=1, backoff_s=0)
    out = RecoveringRun(runner, "chain-b", sleep=lambda _s: None).run(
        _app(tmp_path, 5, policy), "local_cwd", wait_interval=0.2
    )
    assert out.status.state == AppState.FAILED and len(out.attempts) == 2
    cause = out.status.cause()
    assert cause is not None and cause.cause == FailureCause.APPLICATION and cause.exit_code == 3


def test_application_failure_is_not_recovered_by_default(runner: Runner, tmp_path: Path) -> None:
    out = RecoveringRun(runner, "chain-c", sleep=lambda _s: None).run(
        _app(tmp_path, 5, RecoveryPolicy()), "local_cwd", wait_interval=0.2
    )
    assert out.status.state == AppState.FAILED and len(out.attempts) == 1


def test_killed_between_submit_and_record_resumes_without_a_duplicate(
    runner: Runner, tmp_path: Path
) -> None:
    """The follower recorded its intent for attempt 1, submitted it and was killed before
    recording the handle; attempt 1 then failed too. The resumed chain finds attempt 1 by its
    job key (a plain resubmission with that key would start it again, as a retry) and goes on
    with attempt 2."""
    policy = RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0)
    app = _app(tmp_path, 2, policy)
    journal_dir = tmp_path / "state" / "recovery"
    # the attempts as the chain submits them: plain jobs under their own job keys
    # one after the other, as the chain runs them (each appends its attempt to the file)
    first = runner.schedule(runner.dryrun(app, "local_cwd", job_key="chain-d/attempt-0"))
    st = runner.wait(first, wait_interval=0.2)
    assert st is not None and st.state == AppState.FAILED
    second = runner.schedule(runner.dryrun(dataclasses.replace(app, attempt=1), "local_cwd",
                                           job_key="chain-d/attempt-1"))  # fmt: skip
    st = runner.wait(second, wait_interval=0.2)
    assert st is not None and st.state == AppState.FAILED
    journal = Journal("chain-d", journal_dir)
    journal.save(Chain("chain-d", "local_cwd", [
        Attempt(0, "chain-d/attempt-0", first, "FAILED", "application"),
        Attempt(1, "chain-d/attempt-1"),  # intended, submitted, handle not recorded
    ]))  # fmt: skip
    out = RecoveringRun(runner, "chain-d", sleep=lambda _s: None).run(
        app, "local_cwd", wait_interval=0.2
    )
    assert out.status.state == AppState.SUCCEEDED
    assert [a.handle for a in out.attempts][:2] == [first, second] and len(out.attempts) == 3
    assert _jobs(runner, "chain-d/attempt-1") == 1
    assert (tmp_path / "ckpt" / "progress").read_text() == "0\n1\n2\n"
    assert stat.S_IMODE(os.stat(journal.path).st_mode) == 0o600
    assert json.loads(journal.path.read_text())["done"] is True
    assert [a["attempt"] for a in attempts_of("chain-d", journal_dir)] == [0, 1, 2]


def test_resuming_a_finished_chain_submits_nothing(runner: Runner, tmp_path: Path) -> None:
    policy = RecoveryPolicy(on=["application"], max_recoveries=2, backoff_s=0)
    app = _app(tmp_path, 1, policy)
    first = RecoveringRun(runner, "chain-e", sleep=lambda _s: None)
    first.run(app, "local_cwd", wait_interval=0.2)
    resumed = RecoveringRun(runner, "chain-e", sleep=lambda _s: None)
    again = resumed.run(app, "local_cwd", wait_interval=0.2)
    assert again.status.state == AppState.SUCCEEDED and len(again.attempts) == 2
    assert (tmp_path / "ckpt" / "progress").read_text() == "0\n1\n"
