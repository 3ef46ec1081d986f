"""Logical handles (``chain://``) in ``Runner.watch``/``awatch``/``wait_any``/``open_watch``.

Real ``local_cwd`` jobs. ``local_cwd`` has no infrastructure to lose, so the policy recovers
from the ``application`` cause (the loop is the same for every cause): attempt 0 exits 3,
attempt 1 succeeds. The watch, not ``Runner.wait``, drives the recovery.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.runner import Runner
from tether.runner.events import AppEvent
from tether.specs import AppDef, AppState, RecoveryPolicy, Role

REPLICA = """
import os, pathlib, sys
ckpt = pathlib.Path(os.environ["TETHER_CHECKPOINT"])
ckpt.mkdir(parents=True, exist_ok=True)
attempt = int(os.environ["TETHER_ATTEMPT"])
(ckpt / f"started-{attempt}").write_text("")
sys.exit(3 if attempt == 0 else 0)
"""


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner() as r:
        yield r


def _app(tmp_path: Path, backoff_s: float = 0) -> AppDef:
    role = Role("train", image=str(tmp_path), entrypoint=sys.executable, args=["-c", REPLICA])
    policy = RecoveryPolicy(on=["application"], max_recoveries=2, backoff_s=backoff_s)
    return AppDef("rec", roles=[role], recovery=policy, checkpoint=str(tmp_path / "ckpt"))


def _check_recovered(runner: Runner, tmp_path: Path, handle: str, events: list[AppEvent]) -> None:
    assert {ev.app_handle for ev in events} == {handle}  # one app: the logical job
    finals = [ev for ev in events if ev.final]
    assert finals == [events[-1]]  # the chain's final event, exactly once
    assert events[-1].state == AppState.SUCCEEDED and events[-1].status is not None
    assert events[-1].status.num_restarts == 1
    # attempt 0's FAILED was never handed out as the logical job's end
    assert AppState.FAILED not in {ev.state for ev in events}
    attempts = runner.attempts(handle)
    assert [(a["attempt"], a["state"]) for a in attempts] == [(0, "FAILED"), (1, "SUCCEEDED")]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("started-*")) == [
        "started-0", "started-1"]


def test_awatch_follows_a_chain_into_its_next_attempt(runner: Runner, tmp_path: Path) -> None:
    handle = runner.run(_app(tmp_path), "local_cwd")
    assert handle.startswith("chain://")

    async def follow() -> list[AppEvent]:
        return [ev async for ev in runner.awatch([handle], timeout=120, wait_interval=0.2)]

    events = asyncio.run(follow())
    _check_recovered(runner, tmp_path, handle, events)


def test_watch_waits_the_backoff_then_submits(runner: Runner, tmp_path: Path) -> None:
    """With a backoff the chain shows PENDING (its next attempt is due) and the watch
    submits that attempt itself once the backoff passed."""
    handle = runner.run(_app(tmp_path, backoff_s=0.5), "local_cwd")
    events = list(runner.watch([handle], timeout=120))
    _check_recovered(runner, tmp_path, handle, events)
    pending = [ev for ev in events if ev.state == AppState.PENDING and ev.status is not None
               and "the next attempt is due" in ev.status.msg]  # fmt: skip
    assert pending, [(ev.state, ev.msg) for ev in events]


def test_wait_any_and_open_watch_take_a_chain_with_a_plain_job(
    runner: Runner, tmp_path: Path
) -> None:
    slow = AppDef("slow", roles=[Role("s", image=str(tmp_path), entrypoint=sys.executable,
                                      args=["-c", "import time; time.sleep(600)"])])
    plain = runner.run(slow, "local_cwd")
    handle = runner.run(_app(tmp_path), "local_cwd")
    try:
        first = runner.wait_any([plain, handle], timeout=120)
        assert first is not None and first.app_handle == handle
        assert first.state == AppState.SUCCEEDED
        with runner.open_watch([handle], wait_interval=0.2) as w:  # a chain already over
            ev = w.next(timeout=30)
            assert ev is not None and ev.final and ev.state == AppState.SUCCEEDED
            assert not w.open
    finally:
        runner.cancel(plain)
