"""``StateDirReader``: the ``local_cwd`` follower's scan of real apps' records."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.schedulers.local.records import AppRecord
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.local.watch import StateDirReader
from tether.specs import AppDef, AppState, Role

pytestmark = pytest.mark.timeout(120)


def _app(code: str) -> AppDef:
    return AppDef("app", [Role("r", image="", entrypoint=sys.executable, args=["-c", code])])


def _counting_loads(sched: LocalScheduler, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loads: list[str] = []
    real: Callable[[str], AppRecord | None] = sched.store.load

    def load(app_id: str) -> AppRecord | None:
        loads.append(app_id)
        return real(app_id)

    monkeypatch.setattr(sched.store, "load", load)
    return loads


def test_a_changed_record_is_read_once_and_described_as_describe_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = LocalScheduler("s", state_dir=tmp_path)
    running = sched.submit(_app("import time; time.sleep(60)"), {})
    done = sched.submit(_app("pass"), {})
    try:
        wait_started(sched.store, running)
        sched.wait_for_change(done, 60)
        assert (d := sched.describe(done)) is not None and d.state == AppState.SUCCEEDED
        reader = StateDirReader(sched)
        loads = _counting_loads(sched, monkeypatch)
        seen = reader.read([running, done])
        assert loads == [running, done]  # one read of each record, not one more for describe
        assert seen[running] == sched.describe(running)
        assert seen[done] == sched.describe(done)
        assert seen[running].state == AppState.RUNNING
    finally:
        sched.cancel(running)
        sched.close()
