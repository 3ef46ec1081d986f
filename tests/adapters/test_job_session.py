"""The job session every adapter holds, on real local_cwd jobs: submit-or-attach by the shared
rule, intent recorded before a launch, the one log cursor resumed from a store, and one
hub subscription for a whole follow."""

from __future__ import annotations

import stat
import sys
import uuid
from pathlib import Path

import pytest

from tether.adapters.common import FileCursorStore, JobSession, LogCursor
from tether.runner import get_runner
from tether.runner.reattach import Action, EarlierJob, Reattach
from tether.schedulers.watch import WatchHub
from tether.schedulers.watch import hub as hub_module
from tether.schedulers.watch.hub import Deliver
from tether.specs import AppDef, AppState, Role


def _app(code: str) -> AppDef:
    return AppDef("sess", [Role("r", image="", entrypoint=sys.executable, args=["-c", code])])


def test_submit_attaches_to_a_running_job_and_records_intent_before_a_launch() -> None:
    key = f"test-session-{uuid.uuid4().hex[:12]}"
    app = _app("import time; time.sleep(60)")
    with get_runner() as runner:
        first = JobSession(app, "local_cwd", key=key, runner=runner)
        handles_seen_before_launch: list[str | None] = []
        decision = first.submit(before_launch=lambda: handles_seen_before_launch.append(
            first.app_handle))
        try:
            assert decision.action is Action.LAUNCH and not first.reattached
            assert handles_seen_before_launch == [None]  # called before the job existed
            # a second follower with the same key finds the running job and attaches
            second = JobSession(app, "local_cwd", key=key, runner=runner)
            again = second.submit(before_launch=lambda: handles_seen_before_launch.append("x"))
            assert again.action is Action.ATTACH
            assert second.reattached and second.app_handle == first.app_handle
            assert handles_seen_before_launch == [None]  # no launch, no intent recorded
            # reattach='never' launches anew and cancels the running job first
            third = JobSession(app, "local_cwd", key=key, runner=runner)
            earlier = EarlierJob(first.app_handle, first.status())
            assert third.submit(earlier, Reattach.NEVER).cancel_previous == first.app_handle
            assert third.app_handle != first.app_handle
            stopped = first.wait(wait_interval=0.1, timeout=30)
            assert stopped.state == AppState.CANCELLED
        finally:
            for s in (first, third):
                if s.app_handle:
                    s.cancel()


def test_a_saved_cursor_resumes_the_logs_without_repeats_or_gaps(tmp_path: Path) -> None:
    app = _app("for i in range(6): print('line', i, flush=True)")
    store = FileCursorStore(tmp_path / "cursors" / "job.json")
    with JobSession(app, "local_cwd") as session:
        session.submit()
        assert session.wait(wait_interval=0.1, timeout=60).state == AppState.SUCCEEDED
        first: list[str] = []
        cursor = LogCursor.load(store)  # nothing saved yet: from the first line
        for n, line in enumerate(cursor.new_lines(session.runner, str(session.app_handle),
                                                  follow=False)):
            first.append(line)
            if n == 3:  # the first follower stops after four lines and saves its cursor
                break
        assert store.save(cursor.seen)
        # a later follower resumes from the saved cursor
        rest: list[str] = []
        session.stream_logs(rest.append, follow=False, cursor=LogCursor.load(store))
    assert first == [f"r/0 line {i}" for i in range(4)]
    assert rest == [f"r/0 line {i}" for i in range(4, 6)]
    assert stat.S_IMODE((tmp_path / "cursors" / "job.json").stat().st_mode) == 0o600


class _CountingHub(WatchHub):
    """A hub that counts subscriptions and keeps no view after its last subscriber left."""

    def __init__(self) -> None:
        super().__init__(linger=0.0)
        self.subscribes = 0

    def subscribe(self, deliver: Deliver) -> int:
        self.subscribes += 1
        return super().subscribe(deliver)


def test_follow_holds_one_subscription_for_the_whole_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = _CountingHub()
    monkeypatch.setattr(hub_module, "_HUB", hub)
    app = _app("import time\nfor i in range(600): print('tick', i, flush=True); time.sleep(0.1)")
    polls: list[int] = []

    def should_stop() -> str | None:
        polls.append(1)
        return "stopped by the test" if len(polls) >= 20 else None

    lines: list[str] = []
    try:
        with JobSession(app, "local_cwd") as session:
            session.submit()
            result = session.follow(sink=lines.append, poll_interval=0.05,
                                    should_stop=should_stop, drain_timeout=1.0)  # fmt: skip
        assert result.state == AppState.CANCELLED
        assert session.stop_reason == "stopped by the test"
        assert len(polls) >= 20 and lines  # many slices, logs streamed meanwhile
        # one subscription for all of them (a slice used to subscribe anew each time), and
        # one view built, not one per slice
        assert hub.subscribes == 1, hub.subscribes
        assert hub.stats() == {"views": 0, "jobs": 0, "subscribers": 0, "refs": 0}
    finally:
        hub.close()


def test_a_second_session_attaches_to_the_logical_job_of_the_first() -> None:
    """An app with a recovery policy: the first session starts its logical job, a second
    one with the same key (a retried task) finds it by the key and attaches, submitting
    nothing; a cancel through either stops it."""
    from tether.specs import RecoveryPolicy

    key = f"test-session-chain-{uuid.uuid4().hex[:12]}"
    app = AppDef("sess", [Role("r", image="", entrypoint=sys.executable,
                               args=["-c", "import time; time.sleep(60)"])],
                 recovery=RecoveryPolicy(max_recoveries=1))  # fmt: skip
    with get_runner() as runner:
        first = JobSession(app, "local_cwd", key=key, runner=runner)
        assert first.submit().action is Action.LAUNCH
        handle = first.app_handle
        assert handle is not None and handle.startswith("chain://")
        try:
            found = runner.find_job("local_cwd", key)
            assert found is not None and found.app_handle == handle
            second = JobSession(app, "local_cwd", key=key, runner=runner)
            assert second.submit().action is Action.ATTACH
            assert second.reattached and second.app_handle == handle
            assert len(runner._scheduler("local_cwd").find_jobs(f"{key}/attempt-0")) == 1
        finally:
            second_result = first.cancel_and_wait(timeout=30, poll_interval=0.2)
        assert second_result is not None and second_result.state == AppState.CANCELLED
        assert [a["attempt"] for a in runner.attempts(handle)] == [0]


def test_following_a_job_it_launched_reads_no_status_to_set_up() -> None:
    # the launch built the job's scheduler in the runner: follow() streams and waits without
    # a status read of its own first; a session that attached reads one (it builds the
    # scheduler before the log thread uses it), and both deliver every line once
    app = _app("for i in range(5): print('line', i, flush=True)")
    with get_runner() as runner:
        with JobSession(app, "local_cwd", runner=runner) as session:
            session.submit()
            handle = session.app_handle
            reads: list[str] = []
            status = session.follower.status

            def counting(app_handle: str) -> object:
                reads.append(app_handle)
                return status(app_handle)

            session.follower.status = counting  # type: ignore[method-assign]
            lines: list[str] = []
            result = session.follow(sink=lines.append, poll_interval=0.05)
        assert result.state == AppState.SUCCEEDED
        assert reads == []
        assert [x.split(" ", 1)[1] for x in lines] == [f"line {i}" for i in range(5)]
    assert handle is not None
    with JobSession.attach(handle) as attached:
        again: list[str] = []
        assert attached.follow(sink=again.append, poll_interval=0.05).succeeded
        assert again == lines
