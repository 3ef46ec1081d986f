"""A log consumer that gives up ends its readers promptly, also those waiting for a line.

Real ``local_cwd`` replicas that stay quiet (the Kubernetes case, a Pending pod waiting on
the watch hub, is in ``tests/e2e/test_kube_log_follow.py``), and the stop request itself.
"""

from __future__ import annotations

import sys
import threading

import pytest

from tether.runner import fan_in, get_runner
from tether.schedulers import interrupt
from tether.specs import AppDef, Role

pytestmark = pytest.mark.timeout(180)


def _py(name: str, code: str) -> Role:
    return Role(name, image="", entrypoint=sys.executable, args=["-c", code])


def _log_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.name.startswith("logs-")]


def test_abandoning_a_stream_ends_the_readers_of_quiet_replicas() -> None:
    talker = "import sys, time; print('hello', flush=True); time.sleep(600)"
    quiet = "import time; time.sleep(600)"
    app = AppDef("quiet", [_py("talker", talker), _py("quiet", quiet)])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        try:
            before = set(threading.enumerate())
            lines = fan_in(runner, handle, should_tail=True)
            first = next(lines)
            assert first.format() == "talker/0 hello"
            readers = _log_threads(before)
            assert sorted(t.name for t in readers) == ["logs-quiet-0", "logs-talker-0"]
            lines.close()  # the consumer is gone; both replicas run on, silent
            for t in readers:
                t.join(timeout=60)  # bounded: before the stop was heard they waited 600 s
            assert not [t.name for t in readers if t.is_alive()]
            status = runner.status(handle)
            assert status is not None and not status.state.is_terminal()
        finally:
            runner.cancel(handle)


def test_a_stop_request_ends_a_pause_and_wakes_registered_waits() -> None:
    token = interrupt.StopToken()
    woken: list[str] = []
    unregister = token.on_set(lambda: woken.append("a"))
    token.on_set(lambda: woken.append("b"))
    unregister()
    interrupt.pause(0.0)  # no token for this thread: a plain sleep
    ended: list[BaseException] = []

    def paused() -> None:
        with interrupt.stoppable(token):
            try:
                interrupt.pause(600)
            except interrupt.Stopped as e:
                ended.append(e)
        interrupt.check()  # outside: this thread's reads are no longer stoppable

    t = threading.Thread(target=paused)
    t.start()
    token.set()
    t.join(timeout=60)
    assert not t.is_alive() and len(ended) == 1
    assert woken == ["b"]  # the unregistered one was not called
    late: list[str] = []
    token.on_set(lambda: late.append("late"))  # registered after the stop: called at once
    assert late == ["late"]
    with interrupt.stoppable(token), pytest.raises(interrupt.Stopped):
        interrupt.check()
    assert interrupt.current() is None


def test_a_condition_wait_ends_on_the_stop_request_and_only_then() -> None:
    cond = threading.Condition()
    token = interrupt.StopToken()
    assert not interrupt.wait_for(cond, lambda: False, 0.0)  # no token: a plain wait
    outcome: list[str] = []

    def waiting() -> None:
        with interrupt.stoppable(token):
            try:
                interrupt.wait_for(cond, lambda: False, 600)
                outcome.append("returned")
            except interrupt.Stopped:
                outcome.append("stopped")

    t = threading.Thread(target=waiting)
    t.start()
    with cond:
        cond.notify_all()  # a change that does not satisfy the wait: it waits on
    token.set()
    t.join(timeout=60)
    assert not t.is_alive() and outcome == ["stopped"]
