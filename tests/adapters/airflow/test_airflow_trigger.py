"""TetherJobTrigger on a real asyncio loop against real local_cwd jobs.

The last test counts the watch hub's views and reads to show that many triggers on one
loop, as in one triggerer, follow their jobs through one shared view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.local_started import wait_running
from tests.schedulers.watch.counting import CountingHub
from tether.adapters.airflow.trigger import TetherJobTrigger
from tether.runner import get_runner
from tether.specs import AppDef, AppState, Role


def _launch(code: str) -> str:
    app = AppDef("trig", [Role("worker", image="", entrypoint=sys.executable, args=["-c", code])])
    with get_runner() as runner:
        return runner.run(app, "local_cwd")


async def _first_event(trigger: TetherJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def test_trigger_fires_once_the_job_ends_without_blocking_the_loop() -> None:
    handle = _launch("import time; time.sleep(6)")
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1)

    async def main() -> tuple[dict[str, Any], int, float]:
        ticks = 0
        worst = 0.0

        async def ticker() -> None:
            nonlocal ticks, worst
            while True:
                before = time.monotonic()
                await asyncio.sleep(0.01)
                worst = max(worst, time.monotonic() - before)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        event = await _first_event(trigger)
        tick_task.cancel()
        return event, ticks, worst

    event, ticks, worst = asyncio.run(main())
    assert {k: event[k] for k in ("app_handle", "state", "msg", "ui_url")} == {
        "app_handle": handle, "state": "SUCCEEDED", "msg": "", "ui_url": None}
    assert event["timed_out"] is False
    # the event loop kept running while the trigger waited on the 6 s job (a trigger that
    # waited on the loop would stall it for seconds; no contention stalls it for 3)
    assert ticks > 50
    assert worst < 3


def test_trigger_can_run_again_after_firing() -> None:
    handle = _launch("import sys; print('bad input', file=sys.stderr); sys.exit(4)")
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1)
    first = asyncio.run(_first_event(trigger))
    # a triggerer restart re-creates it from serialize() and runs it again
    classpath, kwargs = trigger.serialize()
    assert classpath == "tether.adapters.airflow.trigger.TetherJobTrigger"
    again = asyncio.run(_first_event(TetherJobTrigger(**kwargs)))
    assert first == again
    assert first["state"] == "FAILED"
    assert "exited with code 4" in first["msg"]


def test_trigger_reports_a_job_the_scheduler_does_not_know() -> None:
    trigger = TetherJobTrigger(app_handle="local_cwd://tether/nope-123", poll_interval=0.1)
    event = asyncio.run(_first_event(trigger))
    assert event["state"] == "UNKNOWN"
    assert "no longer knows" in event["msg"]


def test_killing_the_deferred_task_cancels_the_job() -> None:
    handle = _launch("import time; time.sleep(120)")
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1)

    async def main() -> None:
        waiting = asyncio.create_task(_first_event(trigger))
        await asyncio.sleep(0.5)
        # the triggerer calls on_kill() when a user marks the deferred task failed or clears
        # it, then cancels the trigger's run()
        await trigger.on_kill()
        waiting.cancel()

    asyncio.run(main())
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.1, timeout=15)
    assert status is not None and status.state == AppState.CANCELLED


class _Lines(logging.Handler):
    """Collects what the trigger writes to its log (the task log, in Airflow)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _with_log(trigger: TetherJobTrigger, name: str) -> _Lines:
    handler = _Lines()
    logger = logging.getLogger(f"tether.tests.trigger.{name}")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    trigger._log = logger  # type: ignore[assignment]
    return handler


class _DictStore:
    """A cursor store in a dict (a CursorStore)."""

    def __init__(self, saved: dict[str, Any], key: str, fails: list[int] | None = None) -> None:
        self.saved, self.key, self.fails = saved, key, fails

    def load(self) -> Any:
        return self.saved.get(self.key)

    def save(self, seen: Any) -> bool:
        if self.fails is not None and self.fails[0] < 2:  # the first two saves fail
            self.fails[0] += 1
            return False
        self.saved[self.key] = dict(seen)
        return True


class _SavedCursorTrigger(TetherJobTrigger):
    """Keeps the log cursor in a dict instead of the task instance's XCom: outside a task there
    is no Airflow supervisor channel (the DAG test below saves it in the real XCom)."""

    saved: dict[str, Any] = {}

    def _cursor_store(self) -> Any:
        return _DictStore(self.saved, self.app_handle)


def _gated_job(gate: Path, first: int, then: int) -> str:
    code = (
        "import pathlib, sys, time\n"
        f"for i in range({first}): print('early', i, flush=True)\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)\n"
        f"for i in range({then}): print('late', i, flush=True)\n"
    )
    return _launch(code)


async def _until(pred: Any, timeout: float = 30.0, why: Any = None) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting{': ' + why() if why else ''}"
        await asyncio.sleep(0.05)


def _state(handle: str) -> AppState | None:
    with get_runner() as runner:
        status = runner.status(handle)
    return status.state if status is not None else None


def _job_report(handle: str) -> str:
    """The job's state and log, for a failure message."""
    with get_runner() as runner:
        status = runner.status(handle)
        lines = list(runner.log_lines(handle, "worker", 0, should_tail=False))
    return f"job {status.state.name if status else None} ({status.msg if status else ''}); " \
        f"its log: {lines}"


def test_trigger_streams_lines_while_the_job_runs(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    handle = _gated_job(gate, 3, 2)
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1)
    out = _with_log(trigger, "live")

    async def main() -> dict[str, Any]:
        waiting = asyncio.create_task(_first_event(trigger))
        # the early lines reach the log while the job still waits for the gate
        await _until(lambda: "worker/0 early 2" in out.lines)
        # running, gate closed (SUBMITTED until its supervisor's record confirms the start)
        await _until(lambda: _state(handle) == AppState.RUNNING, why=lambda: _job_report(handle))
        gate.touch()
        return await waiting

    try:
        event = asyncio.run(main())
    finally:
        gate.touch()  # a failed check leaves no job waiting for its gate
    assert event["state"] == "SUCCEEDED"
    job_lines = [line for line in out.lines if line.startswith("worker/0 ")]
    assert job_lines == [f"worker/0 early {i}" for i in range(3)] + [
        f"worker/0 late {i}" for i in range(2)]
    assert event["log_cursor"] == {"worker/0": 5}


def test_trigger_writes_each_progress_report_while_the_job_runs(tmp_path: Path) -> None:
    from tests.adapters.progress_app import FIRST, LAST, training

    gate = tmp_path / "gate"
    with get_runner() as runner:
        handle = runner.run(training(str(gate)), "local_cwd")
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1)
    out = _with_log(trigger, "progress")

    async def main() -> dict[str, Any]:
        waiting = asyncio.create_task(_first_event(trigger))
        try:  # the first report reaches the log while the job waits for the gate
            await _until(lambda: f"tether progress: {FIRST}" in out.lines, 120,
                         lambda: f"the trigger's log: {out.lines}")
        finally:
            gate.touch()
        return await waiting

    event = asyncio.run(main())
    assert event["state"] == "SUCCEEDED"
    reports = [line for line in out.lines if line.startswith("tether progress:")]
    assert reports[0] == f"tether progress: {FIRST}"
    assert reports[-1].startswith(f"tether progress: {LAST}")  # read once the job ended
    assert len(reports) == 2  # each report once


def test_a_resumed_trigger_neither_repeats_nor_drops_lines(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    handle = _gated_job(gate, 4, 3)
    first = _SavedCursorTrigger(app_handle=handle, poll_interval=0.1, dag_id="d", run_id="r",
                                task_id="t")
    first_out = _with_log(first, "first")

    async def main() -> dict[str, Any]:
        running = asyncio.create_task(_first_event(first))
        await _until(
            lambda: _SavedCursorTrigger.saved.get(handle) == {"worker/0": 4},
            why=lambda: f"saved cursor {_SavedCursorTrigger.saved.get(handle)}; trigger wrote "
            f"{first_out.lines}; first event done: {running.done()}; {_job_report(handle)}",
        )
        # the triggerer stops (restart, trigger moved): the trigger is cancelled
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        gate.touch()
        _classpath, kwargs = first.serialize()
        again = _SavedCursorTrigger(**kwargs)
        nonlocal second_out
        second_out = _with_log(again, "second")
        return await _first_event(again)

    second_out: _Lines | None = None
    try:
        event = asyncio.run(main())
    finally:
        gate.touch()  # a failure above must not leave the job waiting for the gate
    assert second_out is not None
    before = [x for x in first_out.lines if x.startswith("worker/0 ")]
    after = [x for x in second_out.lines if x.startswith("worker/0 ")]
    assert before == [f"worker/0 early {i}" for i in range(4)]
    assert after == [f"worker/0 late {i}" for i in range(3)]
    assert event["state"] == "SUCCEEDED"


def test_a_failed_save_of_the_log_cursor_is_tried_again_without_new_lines(
    tmp_path: Path,
) -> None:
    """Saving the cursor (an XCom write) can fail for a moment (a busy metadata database):
    the trigger tries again at its next poll, also when no new line comes to prompt it."""

    fails = [0]

    class FlakySave(_SavedCursorTrigger):
        def _cursor_store(self) -> Any:
            return _DictStore(self.saved, self.app_handle, fails)

    gate = tmp_path / "gate"
    handle = _gated_job(gate, 2, 1)
    trigger = FlakySave(app_handle=handle, poll_interval=0.1, dag_id="d", run_id="r",
                        task_id="t")
    out = _with_log(trigger, "flaky")

    async def main() -> dict[str, Any]:
        running = asyncio.create_task(_first_event(trigger))
        # the job prints its two lines, then waits: no further line comes until the gate
        await _until(
            lambda: _SavedCursorTrigger.saved.get(handle) == {"worker/0": 2},
            why=lambda: f"saved {_SavedCursorTrigger.saved.get(handle)}, {fails[0]} "
            f"failed saves; trigger wrote {out.lines}; trigger ended: "
            f"{running.done() and (running.exception() or running.result())!r}; "
            f"{_job_report(handle)}",
        )
        gate.touch()
        return await running

    try:
        event = asyncio.run(main())
    finally:
        gate.touch()
    assert fails[0] == 2
    assert event["state"] == "SUCCEEDED"


def test_a_cursor_that_cannot_be_saved_is_reported_once() -> None:
    # outside a task there is no channel to Airflow's API: XCom.set fails
    trigger = TetherJobTrigger(app_handle="local_cwd://t/x", dag_id="d", run_id="r", task_id="t")
    out = _with_log(trigger, "unsaved")
    store = trigger._cursor_store()
    assert store is not None
    assert store.save({"worker/0": 1}) is False
    assert store.save({"worker/0": 2}) is False
    assert sum("cannot save the log cursor" in line for line in out.lines) == 1, out.lines


def test_trigger_cancels_the_job_at_the_deadline() -> None:
    handle = _launch("import time; print('working', flush=True); time.sleep(120)")
    trigger = TetherJobTrigger(app_handle=handle, poll_interval=0.1, deadline=time.time() + 1.0)
    event = asyncio.run(_first_event(trigger))
    assert event["timed_out"] is True
    assert event["state"] == "CANCELLED"
    with get_runner() as runner:
        status = runner.status(handle)
    assert status is not None and status.state == AppState.CANCELLED


def test_killing_a_cleared_deferred_task_leaves_the_job_for_the_next_try() -> None:
    handle = _launch("import time; time.sleep(120)")

    class Cleared(TetherJobTrigger):
        def _ti_state(self) -> str | None:  # what Airflow reports after a clear
            return None

    trigger = Cleared(app_handle=handle, poll_interval=0.1, dag_id="d", run_id="r", task_id="t")
    asyncio.run(trigger.on_kill())
    with get_runner() as runner:
        wait_running(runner, handle)  # left running: it turns RUNNING, not CANCELLED
        runner.cancel(handle)


def test_triggers_on_one_loop_share_one_view_of_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingHub().install(monkeypatch)
    go = tmp_path / "go"
    code = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    handles = [_launch(code) for _ in range(5)]
    triggers = [TetherJobTrigger(app_handle=h, poll_interval=0.1, stream_logs=False)
                for h in handles]

    async def main() -> tuple[list[dict[str, Any]], dict[str, int]]:
        runs = [asyncio.create_task(_first_event(t)) for t in triggers]
        for _ in range(600):  # until the triggers follow every job (or they never will)
            if counting.reads and len(counting.reads[-1]) == len(handles):
                break
            await asyncio.sleep(0.05)
        following = counting.hub.stats()
        go.touch()
        return list(await asyncio.gather(*runs)), following

    try:
        events, following = asyncio.run(main())
    finally:
        go.touch()  # the jobs end whatever happened to the test (no replica left waiting)
    assert [e["state"] for e in events] == ["SUCCEEDED"] * len(handles)
    assert [e["app_handle"] for e in events] == handles
    # five triggers, one shared view: one reader, whose reads cover every followed job
    assert following["views"] == 1 and following["jobs"] == len(handles)
    assert following["subscribers"] == len(handles)
    assert counting.readers == 1
    assert len(set().union(*counting.reads)) == len(handles)
    assert counting.most_read() == len(handles)
    counting.hub.close()
