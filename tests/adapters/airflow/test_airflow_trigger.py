"""TetherJobTrigger on a real asyncio loop against real local_cwd jobs."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

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
    handle = _launch("import time; time.sleep(1.5)")
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
    assert event == {"app_handle": handle, "state": "SUCCEEDED", "msg": "", "ui_url": None}
    # the event loop kept running while the trigger waited on the scheduler
    assert ticks > 50
    assert worst < 0.5


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
