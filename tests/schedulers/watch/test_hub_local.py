"""The watch hub on the real ``local_cwd`` backend (real supervisors and replicas).

Many subscribers of a job, late subscribers, many jobs through ``Runner.watch`` and
``Runner.wait_any``, a job deleted out of band, the asyncio API, and subscribers released.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import sys
import threading
import weakref
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.runner import get_runner
from tether.runner.api import Runner
from tether.schedulers.capabilities import Follow
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.watch import AsyncSubscription, JobEvent, Subscription, WatchHub
from tether.specs import AppDef, AppState, Role

pytestmark = pytest.mark.timeout(120)


def _app(name: str, code: str) -> AppDef:
    return AppDef(name, [Role("r", image="", entrypoint=sys.executable, args=["-c", code])])


def _sleeper(seconds: float, rc: int = 0) -> AppDef:
    return _app("sleeper", f"import time, sys; time.sleep({seconds}); sys.exit({rc})")


def _launch(runner: Runner, app: AppDef) -> tuple[str, LocalScheduler, str]:
    handle = runner.run(app, "local_cwd")
    sched, app_id = runner._scheduler_for(handle)
    assert isinstance(sched, LocalScheduler)
    return handle, sched, app_id


def _drain(sub: Subscription, timeout: float = 60) -> list[JobEvent]:
    return list(sub.events(timeout=timeout))


def test_subscribers_share_one_view_and_each_hears_the_end_once() -> None:
    hub = WatchHub()
    with get_runner() as runner:
        handle, sched, app_id = _launch(runner, _sleeper(1.0, rc=3))
        subs = [Subscription(hub) for _ in range(5)]
        for s in subs:
            s.follow(sched, app_id, ref=handle)
        assert hub.stats()["views"] == 1 and hub.stats()["jobs"] == 1
        heard = [_drain(s) for s in subs]
        for events in heard:
            finals = [e for e in events if e.final]
            assert len(finals) == 1, events
            assert finals[0].state == AppState.FAILED and finals[0].ref == handle
            assert events[-1] is finals[0]
            states = [e.state for e in events]
            assert len(states) == len(set(zip(states, [e.msg for e in events], strict=True)))
        # a subscriber that joins after the end hears it at once, once
        late = Subscription(hub)
        late.follow(sched, app_id)
        ev = late.get(timeout=0)
        assert ev is not None and ev.state == AppState.FAILED and ev.previous is None
        assert late.get(timeout=0.5) is None
        for s in [*subs, late]:
            s.close()
    assert hub.stats() == {"views": 0, "jobs": 0, "subscribers": 0, "refs": 0}
    hub.close()


def test_runner_watch_and_wait_any_follow_many_jobs() -> None:
    with get_runner() as runner:
        quick = runner.run(_sleeper(0.2), "local_cwd")
        slow = [runner.run(_sleeper(2.0 + i * 0.1), "local_cwd") for i in range(3)]
        first = runner.wait_any([*slow, quick], timeout=60)
        assert first is not None and first.app_handle == quick
        assert first.state == AppState.SUCCEEDED and first.status is not None
        finals: dict[str, int] = {}
        for ev in runner.watch([*slow, quick], timeout=60):
            if ev.final:
                finals[ev.app_handle] = finals.get(ev.app_handle, 0) + 1
        assert finals == dict.fromkeys([*slow, quick], 1)
        for h in slow:
            status = runner.status(h)
            assert status is not None and status.state == AppState.SUCCEEDED


def test_a_job_deleted_out_of_band_ends_with_a_clear_message(tmp_path: Path) -> None:
    with get_runner() as runner:
        handle, sched, app_id = _launch(runner, _sleeper(60))
        wait_started(sched.store, app_id)  # no file is being made while it is copied
        app_dir = sched.store.app_dir(app_id)
        kept = tmp_path / "kept"
        with Subscription(WatchHub()) as sub:
            sub.follow(sched, app_id, ref=handle)
            first = sub.get(timeout=30)
            assert first is not None and not first.final
            shutil.copytree(app_dir, kept)
            try:
                shutil.rmtree(app_dir)
                events = _drain(sub, timeout=30)
            finally:  # put the record back so the app's processes can be stopped
                shutil.rmtree(app_dir, ignore_errors=True)
                shutil.copytree(kept, app_dir)
                runner.cancel(handle)
        assert len(events) >= 1 and events[-1].gone and events[-1].final
        assert events[-1].status() is None
        assert "no longer exists on local_cwd" in events[-1].msg
        assert sum(e.final for e in events) == 1
        assert runner.wait(handle, timeout=30) is not None  # the cancelled record is back


def test_waiting_for_an_app_that_never_existed_returns_none() -> None:
    with get_runner() as runner:
        handle = "local_cwd://tether/no-such-app-12345"
        assert runner.wait(handle, timeout=30) is None
        assert runner.status(handle) is None


def test_async_subscribers_on_one_event_loop() -> None:
    with get_runner() as runner:
        handles = [runner.run(_sleeper(0.3 * (i + 1)), "local_cwd") for i in range(4)]
        targets = [runner._scheduler_for(h) for h in handles]

        async def follow_one(handle: str, target: tuple[object, str]) -> list[JobEvent]:
            async with AsyncSubscription() as sub:
                sub.follow(target[0], target[1], ref=handle)  # type: ignore[arg-type]
                return [ev async for ev in sub.events(timeout=60)]

        async def main() -> list[list[JobEvent]]:
            return await asyncio.gather(
                *(follow_one(h, t) for h, t in zip(handles, targets, strict=True))
            )

        results = asyncio.run(main())
        for handle, events in zip(handles, results, strict=True):
            assert [e.final for e in events].count(True) == 1
            assert events[-1].ref == handle and events[-1].state == AppState.SUCCEEDED


def test_no_leak_after_10000_subscribe_unsubscribe_cycles() -> None:
    hub = WatchHub()
    with get_runner() as runner:
        handle, sched, app_id = _launch(runner, _sleeper(60))
        try:
            anchor = Subscription(hub)  # keeps the view (and its thread) alive
            anchor.follow(sched, app_id)
            assert anchor.get(timeout=30) is not None
            threads = set(threading.enumerate())  # others may end meanwhile (lingering views)
            refs: list[weakref.ref[Subscription]] = []
            for i in range(10_000):
                sub = Subscription(hub)
                sub.follow(sched, app_id, ref=handle)
                assert sub.get(timeout=5) is not None  # the current state, at once
                if i % 2:
                    sub.close()
                else:  # dropped without close: the finalizer releases it
                    refs.append(weakref.ref(sub))
                del sub
            gc.collect()
            assert all(r() is None for r in refs)
            assert hub.stats() == {"views": 1, "jobs": 1, "subscribers": 1, "refs": 1}
            assert [t.name for t in threading.enumerate() if t not in threads] == []
            anchor.close()
            assert hub.stats() == {"views": 0, "jobs": 0, "subscribers": 0, "refs": 0}
        finally:
            runner.cancel(handle)
    hub.close()


def test_views_and_their_threads_end_with_their_last_subscriber() -> None:
    hub = WatchHub()
    with get_runner() as runner:
        handle, sched, app_id = _launch(runner, _sleeper(0.1))
        assert runner.wait(handle, timeout=30) is not None
        before = {t.name for t in threading.enumerate()}
        for _ in range(50):
            with Subscription(hub) as sub:
                sub.follow(sched, app_id)
                assert sub.get(timeout=10) is not None
        assert hub.stats()["views"] == 0
        for t in threading.enumerate():
            if t.name.startswith("tether-watch") and t.name not in before:
                t.join(timeout=10)
                assert not t.is_alive(), t.name
    hub.close()


def test_a_view_lingers_for_the_next_subscriber_then_ends() -> None:
    hub = WatchHub(linger=1.0)
    with get_runner() as runner:
        handle, sched, app_id = _launch(runner, _sleeper(0.1))
        assert runner.wait(handle, timeout=30) is not None
        with Subscription(hub) as sub:
            sub.follow(sched, app_id)
            assert sub.get(timeout=10) is not None
        (view,) = hub._views.values()
        with Subscription(hub) as sub:  # within the linger: the same view, its state at once
            sub.follow(sched, app_id)
            ev = sub.get(timeout=0)
            assert ev is not None and ev.state == AppState.SUCCEEDED
        assert list(hub._views.values()) == [view]
        view.driver.join(timeout=30)  # the view ends by itself once the linger is over
        assert hub.stats()["views"] == 0
    hub.close()


def test_an_apps_end_is_heard_at_once_not_at_the_next_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state directory is scanned every ``follow.interval`` seconds; an app's end wakes
    the scan at once (its supervisor's exit, through a pidfd). With an hour between scans,
    the end is still heard."""
    import dataclasses

    follow = LocalScheduler.capabilities.follow
    slow = dataclasses.replace(
        LocalScheduler.capabilities, follow=Follow(follow.mode, follow.source, interval=3600.0)
    )
    monkeypatch.setattr(LocalScheduler, "capabilities", slow)
    hub = WatchHub()
    try:
        with get_runner() as runner:
            handle, sched, app_id = _launch(runner, _sleeper(1.0, rc=3))
            with Subscription(hub) as sub:
                sub.follow(sched, app_id, ref=handle)
                finals = [e for e in _drain(sub, timeout=60) if e.final]
            assert [e.state for e in finals] == [AppState.FAILED]
    finally:
        hub.close()


def test_the_reader_of_a_followed_job_while_it_is_followed() -> None:
    hub = WatchHub()
    with get_runner() as runner:
        _, sched, app_id = _launch(runner, _sleeper(0.1))
        assert hub.reader(sched, app_id, timeout=0) is None  # no view follows it
        with Subscription(hub) as sub:
            sub.follow(sched, app_id)
            reader = hub.reader(sched, app_id, timeout=30)
            assert reader is not None
            assert app_id in (reader.read([app_id]) or {})  # the view's own cache
        assert hub.reader(sched, app_id, timeout=0) is None  # the view ended with it
    hub.close()
