"""A view whose reads keep failing: retried in silence while it may be a blip, then told.

The policy (:class:`FailureStreak`) is tested on a clock the test turns; the hub's handling
of it with a scripted reader (the hub's own logic is under test here, not a backend's); the
whole path, down to ``Runner.wait`` raising, on the real ``local_cwd`` backend whose state
directory cannot be read (the Kubernetes case is in ``tests/e2e/test_watch_hub_kube.py``).
"""

from __future__ import annotations

import pickle
import shutil
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import pytest

from tether.errors import BackendError, SpecError
from tether.runner import get_runner
from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.watch import (
    FailurePolicy,
    FollowTarget,
    Subscription,
    WatchHub,
    WatchKey,
    WatchReadError,
)
from tether.schedulers.watch import hub as hub_module
from tether.schedulers.watch.driver import FailureStreak
from tether.schedulers.watch.poll import DescribeReader
from tether.specs import AppDef, AppState, Role

pytestmark = pytest.mark.timeout(120)

KEY = WatchKey("scripted", "test")


def test_failures_are_told_only_past_both_bounds_and_forgotten_after_a_success() -> None:
    now = [100.0]
    target = FollowTarget(KEY, lambda: _ScriptedReader(), 1.0)
    streak = FailureStreak(target, FailurePolicy(failures=3, seconds=10.0), lambda: now[0])
    boom = OSError("connection refused")
    # three quick failures: a blip
    for _ in range(3):
        assert streak.failed(boom) is None
        now[0] += 1.0
    assert not streak.succeeded()  # nothing was told: nothing to take back
    # one slow failure is not enough either
    now[0] += 60.0
    assert streak.failed(boom) is None
    now[0] += 60.0
    assert streak.failed(boom) is None
    now[0] += 1.0
    error = streak.failed(OSError("401 Unauthorized"))
    assert error is not None
    assert (error.failures, error.seconds, error.error) == (3, 61.0, "401 Unauthorized")
    assert "scripted" in error.describe() and "401 Unauthorized" in error.describe()
    assert "3 times" in error.describe() and "61 s" in error.describe()
    assert streak.succeeded()  # told: the followers must hear it is over
    assert streak.failed(boom) is None  # a new streak starts from nothing


@pytest.mark.parametrize(("failures", "seconds", "field"), [
    (0, 1.0, "failures"), (True, 1.0, "failures"), (2, -1.0, "seconds"), (2, "1", "seconds"),
])  # fmt: skip
def test_a_bad_policy_is_refused_naming_the_field(failures: Any, seconds: Any, field: str) -> None:
    with pytest.raises(SpecError, match=f"FailurePolicy.{field} must be"):
        FailurePolicy(failures=failures, seconds=seconds)


class _ScriptedReader:
    """Shows each job RUNNING, or fails every read while :attr:`down` is set."""

    def __init__(self) -> None:
        self.down: Exception | None = None
        self.failed = 0
        self.reads = 0
        self.shown: set[str] = set()

    def start(self, wake: Callable[[], None]) -> None:
        pass

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse] | None:
        self.reads += 1
        if self.down is not None:
            self.failed += 1
            raise self.down
        return {
            a: DescribeAppResponse(app_id=a, state=AppState.RUNNING, msg="up")
            for a in app_ids if a in self.shown
        }  # fmt: skip

    def confirm(self, app_id: str) -> DescribeAppResponse | None:  # a direct read shows it
        return DescribeAppResponse(app_id=app_id, state=AppState.RUNNING, msg="up")

    def stop(self) -> None:
        pass


def _scripted_hub(reader: _ScriptedReader, policy: FailurePolicy) -> WatchHub:
    def resolve(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
        return FollowTarget(KEY, lambda: reader, 30.0)

    return WatchHub(resolve=resolve, failing=policy)


def _fail_until(hub: WatchHub, reader: _ScriptedReader, failed: int) -> None:
    """Wakes the view until its reader has failed ``failed`` times (no backoff waits)."""
    driver = hub._views[KEY].driver
    deadline = time.monotonic() + 60
    while reader.failed < failed:
        assert time.monotonic() < deadline, f"only {reader.failed} failed reads"
        driver.wake()
        time.sleep(0.02)


def test_a_failing_view_is_silent_then_told_once_then_cleared() -> None:
    reader = _ScriptedReader()
    reader.shown = {"a"}
    hub = _scripted_hub(reader, FailurePolicy(failures=3, seconds=0.0))
    sched: Any = object()
    with Subscription(hub) as sub:
        sub.follow(sched, "a", ref="job-a")
        first = sub.get(timeout=30)
        assert first is not None and first.state == AppState.RUNNING and first.error is None

        reader.down = OSError("401 Unauthorized")
        _fail_until(hub, reader, 3)
        told = sub.get(timeout=30)  # the next event: nothing was told before it
        assert told is not None and told.error is not None
        assert told.error.failures == 3  # told at the third failure: two were a blip
        assert told.error.error == "401 Unauthorized"
        assert told.error.key == KEY and not told.final
        # the last known state stands: nothing invented
        assert (told.state, told.msg, told.previous) == (AppState.RUNNING, "up", AppState.RUNNING)
        assert hub.current(sched, "a") is None  # a status must read the backend itself

        with Subscription(hub) as late:  # a late subscriber hears the failure at once
            late.follow(sched, "a")
            ev = late.get(timeout=0)
            assert ev is not None and ev.error == told.error

        _fail_until(hub, reader, reader.failed + 3)
        assert sub.get(timeout=0.3) is None  # told once per error, not once per read

        reader.down = None
        back = sub.get(timeout=30)
        assert back is not None and back.error is None and not back.final
        assert back.state == AppState.RUNNING
        assert sub.get(timeout=0.3) is None
    hub.close()


def test_a_job_never_read_is_told_unknown_then_nothing_until_it_is_read() -> None:
    reader = _ScriptedReader()
    reader.down = ConnectionRefusedError("no route to the backend")
    hub = _scripted_hub(reader, FailurePolicy(failures=2, seconds=0.0))
    sched: Any = object()
    with Subscription(hub) as sub:
        sub.follow(sched, "b", ref="job-b")
        _fail_until(hub, reader, 2)
        told = sub.get(timeout=30)
        assert told is not None and told.error is not None
        assert told.state == AppState.UNKNOWN and told.status() is None and not told.gone
        assert "no route to the backend" in told.error.describe()

        reader.down = None  # reads succeed (not showing the job: a direct read finds it)
        ev = sub.get(timeout=30)  # the next event: no UNKNOWN without an error came first
        assert ev is not None and ev.state == AppState.RUNNING and ev.error is None
    hub.close()


def test_the_error_a_follower_raises_is_a_backend_error_that_survives_pickling() -> None:
    err = WatchReadError("cannot follow x: reading kubernetes jobs failed", backend="kubernetes")
    assert isinstance(err, BackendError) and err.kind == "connection"
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.backend == "kubernetes"


def test_the_generic_reader_fails_when_every_describe_fails(tmp_path: Path) -> None:
    """A backend followed with one ``describe`` per job (a scheduler declaring no cheaper
    way): one job that cannot be read is left out (the driver confirms it), but every job
    failing is the backend failing, and the read says so (the policy then applies)."""
    sched = LocalScheduler("s", state_dir=tmp_path)
    reader = DescribeReader(sched)
    apps = sched.store.apps_dir
    apps.mkdir(parents=True, exist_ok=True)
    (apps / "quiet-def456").write_text("not a directory")  # this record cannot be read
    assert reader.read(["quiet-abc123", "quiet-def456"]) == {}  # one job: left out
    with pytest.raises(Exception, match="Not a directory"):
        reader.read(["quiet-def456"])  # every job: the read fails
    assert reader.read([]) == {}


# ---- the real local_cwd backend --------------------------------------------------------------
def _sleeper() -> AppDef:
    code = "import time; time.sleep(600)"
    return AppDef("quiet", [Role("r", image="", entrypoint=sys.executable, args=["-c", code])])


@pytest.fixture
def fast_hub(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process's hub, telling failures after three failed reads (any time)."""
    hub = WatchHub(failing=FailurePolicy(failures=3, seconds=0.0))
    monkeypatch.setattr(hub_module, "_HUB", hub)
    yield hub
    hub.close()


def test_runner_wait_raises_when_the_state_directory_cannot_be_read(
    fast_hub: WatchHub, tmp_path: Path
) -> None:
    with get_runner() as runner:
        handle = runner.run(_sleeper(), "local_cwd")
        sched, app_id = runner._scheduler_for(handle)
        assert isinstance(sched, LocalScheduler)
        app_dir = sched.store.app_dir(app_id)
        kept = tmp_path / "kept"
        try:
            status = runner.wait(handle, timeout=1.0)  # followed, and read once
            assert status is not None and not status.state.is_terminal()
            shutil.move(app_dir, kept)
            app_dir.write_text("not a directory")  # every read of the record now fails
            failed: list[BaseException] = []

            def wait() -> None:
                try:
                    runner.wait(handle)
                except BaseException as e:  # what the waiter raised, kept for the test
                    failed.append(e)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            waiter.join(timeout=90)
            assert not waiter.is_alive(), "Runner.wait is still waiting on a failing read"
        finally:  # put the record back so the app's processes can be stopped
            if app_dir.is_file():
                app_dir.unlink()
            if kept.exists():
                shutil.move(kept, app_dir)
            runner.cancel(handle)
        (err,) = failed
        assert isinstance(err, WatchReadError), repr(err)
        assert err.backend == "local_cwd" and err.kind == "connection"
        text = str(err)
        assert handle in text and "local_cwd" in text and "Not a directory" in text, text
        final = runner.wait(handle, timeout=60)  # readable again: the wait works again
        assert final is not None and final.state.is_terminal()
