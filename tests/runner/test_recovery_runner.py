"""Recovery behind ``Runner.run``/``Runner.wait``: one logical handle over the attempts.

Real ``local_cwd`` jobs (real replica processes). ``local_cwd`` has no infrastructure to
lose, so the policies recover from the ``application`` cause (allowed when listed): the loop
is the same for every cause. The follower that drives recovery is killed with SIGKILL in a
real separate process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.runner import Runner
from tether.runner.journal import Attempt, Journal
from tether.specs import AppDef, AppState, RecoveryPolicy, Role

REPLICA = """
import os, pathlib, sys, time
ckpt = pathlib.Path(os.environ["TETHER_CHECKPOINT"])
ckpt.mkdir(parents=True, exist_ok=True)
attempt = int(os.environ["TETHER_ATTEMPT"])
print(f"hello from attempt {attempt}", flush=True)
(ckpt / f"started-{attempt}").write_text("")
if attempt < int(sys.argv[1]):
    sys.exit(3)
while sys.argv[2] == "gated" and not (ckpt / "go").exists():
    time.sleep(0.05)
"""

DRIVER = """
import sys
from tether.runner import Runner
from tether.specs import AppDef, RecoveryPolicy, Role
script, ckpt, key = sys.argv[1:4]
role = Role("train", image=ckpt, entrypoint=sys.executable, args=[script, "1", "gated"])
app = AppDef("rec", roles=[role], checkpoint=ckpt,
             recovery=RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0))
with Runner() as runner:
    handle = runner.run(app, "local_cwd", job_key=key)
    print(handle, flush=True)
    runner.wait(handle, wait_interval=0.2)
"""


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner() as r:
        yield r


def _app(tmp_path: Path, succeed_on: int, policy: RecoveryPolicy, gated: bool = False) -> AppDef:
    script = tmp_path / "replica.py"
    script.write_text(REPLICA)
    role = Role("train", image=str(tmp_path), entrypoint=sys.executable,
                args=[str(script), str(succeed_on), "gated" if gated else "free"])  # fmt: skip
    return AppDef("rec", roles=[role], recovery=policy, checkpoint=str(tmp_path / "ckpt"))


def _started(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "ckpt").glob("started-*"))


def _jobs(runner: Runner, key: str) -> int:
    return len(runner._scheduler("local_cwd").find_jobs(key))  # the scheduler's own listing


def _until(what: str, cond: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not callable(cond) or not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_one_handle_recovers_through_run_and_wait(runner: Runner, tmp_path: Path) -> None:
    policy = RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0)
    handle = runner.run(_app(tmp_path, 2, policy), "local_cwd")
    assert handle.startswith("chain://")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED
    assert status.num_restarts == 2
    assert status.msg.startswith("attempt 2 on local_cwd (earlier: attempt 0 on local_cwd: "
                                 "FAILED (application); attempt 1")  # fmt: skip
    attempts = runner.attempts(handle)
    assert [(a["attempt"], a["state"], a["cause"]) for a in attempts] == [
        (0, "FAILED", "application"), (1, "FAILED", "application"), (2, "SUCCEEDED", None),
    ]  # fmt: skip
    assert _started(tmp_path) == ["started-0", "started-1", "started-2"]
    # the handle acts on the current attempt; the logs show every attempt with a marker
    described = runner.describe(handle)
    assert described is not None and described.roles[0].name == "train"
    lines = list(runner.log_lines(handle, "train"))
    assert lines == [
        "[tether] attempt 0 on local_cwd\n", "hello from attempt 0\n",
        "[tether] attempt 1 on local_cwd\n", "hello from attempt 1\n",
        "[tether] attempt 2 on local_cwd\n", "hello from attempt 2\n",
    ]  # fmt: skip
    # running it again under its handle's chain submits nothing new
    assert runner.status(handle) == status


def test_status_never_submits_and_cancel_stops_recovery(runner: Runner, tmp_path: Path) -> None:
    """Without a follower the chain waits: its status is PENDING (the next attempt is due),
    nothing is submitted; a cancel then stops recovery for good."""
    policy = RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0)
    handle = runner.run(_app(tmp_path, 1, policy), "local_cwd", job_key="no-follower")
    first = runner.attempts(handle)[0]["handle"]
    st0 = runner.wait(first, wait_interval=0.2)  # the attempt itself, not the logical job
    assert st0 is not None and st0.state == AppState.FAILED
    pending = runner.status(handle)
    assert pending is not None and pending.state == AppState.PENDING
    assert "the next attempt is due" in pending.msg
    assert len(runner.attempts(handle)) == 1 and _jobs(runner, "no-follower/attempt-1") == 0
    runner.cancel(handle)
    final = runner.wait(handle, wait_interval=0.2)
    assert final is not None and final.state == AppState.FAILED
    assert len(runner.attempts(handle)) == 1 and _started(tmp_path) == ["started-0"]


def test_follower_killed_mid_chain_is_adopted_without_a_duplicate(
    runner: Runner, tmp_path: Path
) -> None:
    """The process driving recovery is SIGKILLed while attempt 1 runs; running the app again
    with the same job key adopts the chain (same handle, attempt 1 followed, nothing
    submitted) and recovery goes on from there."""
    app = _app(tmp_path, 1, RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0),
               gated=True)  # fmt: skip
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "replica.py"), str(tmp_path / "ckpt"),
         "killed-follower"], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert driver.stdout is not None
        handle = driver.stdout.readline().strip()
        _until("attempt 1 to run", lambda: (tmp_path / "ckpt" / "started-1").exists())
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    outcome = runner.run_or_attach(app, "local_cwd", job_key="killed-follower")
    assert outcome.app_handle == handle and outcome.reattached
    (tmp_path / "ckpt" / "go").write_text("")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED
    assert [a["attempt"] for a in runner.attempts(handle)] == [0, 1]
    for n in (0, 1):
        assert _jobs(runner, f"killed-follower/attempt-{n}") == 1
    assert _started(tmp_path) == ["started-0", "started-1"]


def test_intent_recorded_but_not_submitted_resumes_from_the_handle_alone(
    runner: Runner, tmp_path: Path
) -> None:
    """A follower killed after recording its intent to submit attempt 1 and before
    submitting it: ``tether wait HANDLE`` in another process, which has only the handle,
    submits attempt 1 once, from the app the journal recorded."""
    policy = RecoveryPolicy(on=["application"], max_recoveries=3, backoff_s=0)
    handle = runner.run(_app(tmp_path, 1, policy), "local_cwd", job_key="intent-only")
    first = runner.attempts(handle)[0]["handle"]
    runner.wait(first, wait_interval=0.2)
    journal = Journal("intent-only", tmp_path / "state" / "recovery")
    chain = journal.load()
    assert chain is not None
    chain.current.state, chain.current.cause = "FAILED", "application"
    chain.attempts.append(Attempt(1, "intent-only/attempt-1", scheduler="local_cwd"))
    journal.save(chain)  # what the killed follower left
    proc = subprocess.run([sys.executable, "-m", "tether.cli.main", "wait", handle],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [handle, "SUCCEEDED"]
    assert _jobs(runner, "intent-only/attempt-1") == 1
    assert _started(tmp_path) == ["started-0", "started-1"]
    assert json.loads(journal.path.read_text())["done"] is True


def test_tailed_logs_show_attempts_run_while_one_was_read(runner: Runner, tmp_path: Path) -> None:
    """The follower may run the next attempts while the previous attempt's lines are still
    being read (a slow log stream: found on kubernetes with ``tether run --log``); tailing
    the logical job still shows them, each after its marker."""
    policy = RecoveryPolicy(on=["application"], max_recoveries=1, backoff_s=0)
    handle = runner.run(_app(tmp_path, 1, policy), "local_cwd")

    def lines(attempt: str, tail: bool) -> Iterator[str]:
        if attempt == runner.attempts(handle)[0]["handle"]:
            final = runner.wait(handle, wait_interval=0.2)  # the job ends meanwhile
            assert final is not None and final.state == AppState.SUCCEEDED
        yield from runner.log_lines(attempt, "train")

    assert list(runner._chains.log_lines(handle, lines, should_tail=True)) == [
        "[tether] attempt 0 on local_cwd\n", "hello from attempt 0\n",
        "[tether] attempt 1 on local_cwd\n", "hello from attempt 1\n",
    ]  # fmt: skip
