"""``local_cwd`` end to end with real processes: run, fail, retry, cancel, survive, logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.schedulers.api import JOB_KEY, Stream
from tether.schedulers.local.render import LocalRequest
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, AppState, InvalidRunConfigException, RetryPolicy, Role, macros
from tether.workspace import Workspace

FAST = {"grace_period": 0.5}


def py(name: str, code: str, **kwargs: object) -> Role:
    """A role running ``python -c code``."""
    return Role(name, entrypoint=sys.executable, args=["-c", textwrap.dedent(code)], **kwargs)  # type: ignore[arg-type]


def gone(pid: int) -> bool:
    """Whether a process exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if not gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if not gone(p)]


def wait_for_file(path: Path, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written in {timeout}s")


def wait_done(s: LocalScheduler, app_id: str, timeout: float = 30.0) -> AppState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = s.describe(app_id)
        assert d is not None
        if d.state.is_terminal():
            return d.state
        s.wait_for_change(app_id, min(1.0, deadline - time.monotonic()))
    raise AssertionError(f"app {app_id} did not finish in {timeout}s: {s.describe(app_id)}")


@pytest.fixture()
def sched() -> Iterator[LocalScheduler]:
    s = create_scheduler("test")
    yield s
    for app in s.list():  # never leave processes behind, whatever the test did
        s.cancel(app.app_id)


def run_py(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a second python process (with this test's TETHER_STATE_DIR)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp,
        check=False,
    )


# ---- running -----------------------------------------------------------------------------
def test_multi_role_app_runs_each_replica_with_its_env_macros_and_cwd(
    sched: LocalScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("LAUNCHER_VAR", "from-launcher")
    code = f"""
        import json, os, sys
        keys = ["TETHER_ROLE_NAME", "TETHER_REPLICA_ID", "TETHER_RANK0_HOST", "LAUNCHER_VAR",
                "ROLE_VAR"]
        doc = {{"env": {{k: os.environ.get(k) for k in keys}}, "argv": sys.argv[1:],
               "cwd": os.getcwd()}}
        name = os.environ["TETHER_ROLE_NAME"] + "-" + os.environ["TETHER_REPLICA_ID"]
        with open(os.path.join({str(out)!r}, name + ".json"), "w") as f:
            json.dump(doc, f)
    """
    args = [macros.app_id, macros.replica_id, macros.img_root, f"${{{'rank0_env'}}}"]
    trainer = py("trainer", code, num_replicas=2, env={"ROLE_VAR": f"r{macros.replica_id}"})
    trainer.args += args
    ps = py("ps", code, env={"ROLE_VAR": "ps"})
    ps.args += args
    ps.workspace = Workspace({str(ws): ""})
    app = AppDef("My App/v1", [trainer, ps])

    app_id = sched.submit(app, {**FAST, "cwd": str(work)})
    assert app_id.startswith("my-app-v1-") and len(app_id) == len("my-app-v1-") + 8
    assert wait_done(sched, app_id) == AppState.SUCCEEDED

    for role, k, cwd in [("trainer", 0, work), ("trainer", 1, work), ("ps", 0, ws)]:
        doc = json.loads((out / f"{role}-{k}.json").read_text())
        assert doc["cwd"] == str(cwd)
        assert doc["argv"] == [app_id, str(k), str(cwd), "TETHER_RANK0_HOST"]
        assert doc["env"] == {
            "TETHER_ROLE_NAME": role,
            "TETHER_REPLICA_ID": str(k),
            "TETHER_RANK0_HOST": "localhost",
            "LAUNCHER_VAR": "from-launcher",
            "ROLE_VAR": f"r{k}" if role == "trainer" else "ps",
        }
    desc = sched.describe(app_id)
    assert desc is not None and desc.num_restarts == 0
    assert [(r.role, [(x.id, x.state, x.exit_code) for x in r.replicas])
            for r in desc.roles_statuses] == [
        ("trainer", [(0, AppState.SUCCEEDED, 0), (1, AppState.SUCCEEDED, 0)]),
        ("ps", [(0, AppState.SUCCEEDED, 0)]),
    ]
    assert [r.name for r in desc.roles] == ["trainer", "ps"]


def test_describe_right_after_submit_knows_the_app(sched: LocalScheduler) -> None:
    """``submit`` returns once the supervisor claimed the app (maybe before the replicas
    started): the app is SUBMITTED until then, never unknown."""
    for code in ("pass", "import time; time.sleep(2)"):
        app_id = sched.submit(AppDef("quick", [py("r", code, num_replicas=3)]), FAST)
        d = sched.describe(app_id)
        assert d is not None
        assert d.state in (AppState.SUBMITTED, AppState.RUNNING, AppState.SUCCEEDED), d
        assert all(r.state != AppState.UNKNOWN for rs in d.roles_statuses for r in rs.replicas)


def test_a_failing_replica_fails_the_app_and_stops_the_others(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid0"
    code = f"""
        import os, sys, time
        if os.environ["TETHER_REPLICA_ID"] == "0":
            open({str(pidfile)!r}, "w").write(f"{{os.getpid()}}\\n")
            time.sleep(60)
        time.sleep(0.3)
        for i in range(1, 13):
            print(f"boom {{i}}", file=sys.stderr)
        sys.exit(3)
    """
    app_id = sched.submit(AppDef("failing", [py("worker", code, num_replicas=2)]), FAST)
    assert wait_done(sched, app_id) == AppState.FAILED
    d = sched.describe(app_id)
    assert d is not None
    assert "role 'worker' replica 1 exited with code 3" in d.msg
    assert d.msg.rstrip().endswith("boom 12") and "boom 3" in d.msg and "boom 2\n" not in d.msg
    reps = d.roles_statuses[0].replicas
    assert (reps[1].state, reps[1].exit_code) == (AppState.FAILED, 3)
    assert reps[0].state == AppState.CANCELLED  # stopped because replica 1 failed
    assert wait_gone([int(pidfile.read_text())]) == []


def test_a_replica_killed_by_a_signal_names_the_signal(sched: LocalScheduler) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    app_id = sched.submit(AppDef("killed", [py("r", code)]), FAST)
    assert wait_done(sched, app_id) == AppState.FAILED
    d = sched.describe(app_id)
    assert d is not None and "was killed by signal SIGKILL (exit code -9)" in d.msg


def _counting(tmp: Path, fail_when: str, then: str = "") -> str:
    """Code that records each start in ``tmp/<role>-<k>`` and fails when ``fail_when``."""
    return f"""
        import os, sys, time
        me = os.environ["TETHER_ROLE_NAME"] + "-" + os.environ["TETHER_REPLICA_ID"]
        path = os.path.join({str(tmp)!r}, me)
        with open(path, "a") as f:
            f.write("x")
        starts = len(open(path).read())
        {then}
        if {fail_when}:
            print("failing on purpose", file=sys.stderr)
            sys.exit(1)
    """


def _starts(tmp: Path) -> dict[str, int]:
    return {p.name: len(p.read_text()) for p in sorted(tmp.iterdir())}


def test_replica_retry_policy_restarts_only_the_failed_replica(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    code = _counting(tmp_path, "me == 'w-1' and starts == 1", then="time.sleep(0.5)")
    role = py("w", code, num_replicas=3, max_retries=1, retry_policy=RetryPolicy.REPLICA)
    app_id = sched.submit(AppDef("retry-replica", [role]), FAST)
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert _starts(tmp_path) == {"w-0": 1, "w-1": 2, "w-2": 1}
    d = sched.describe(app_id)
    assert d is not None and d.num_restarts == 1
    combined = "".join(sched.log_iter(app_id, "w", 1))
    assert "failing on purpose\n[tether] restarting w[1]" in combined


def test_the_record_identifies_every_started_process_also_after_a_restart(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    """Other processes (cancel, recovery) tell a replica from a reuse of its pid by the start
    time in the record: it is there for every replica once the start is confirmed, also for
    one that exited at once, and for a restarted replica's new process."""
    from tether.schedulers.local.proctable import pid_alive, read_stat

    quick = Role("quick", entrypoint="true")
    # w[1] fails at its first start; then both run until cancelled
    code = _counting(tmp_path, "me == 'w-1' and starts == 1",
                     then="time.sleep(0 if (me, starts) == ('w-1', 1) else 30)")
    role = py("w", code, num_replicas=2, max_retries=1, retry_policy=RetryPolicy.REPLICA)
    app_id = sched.submit(AppDef("identities", [quick, role]), FAST)
    rec = wait_started(sched.store, app_id)
    for rep in rec.replicas:
        assert rep.pid is not None and rep.start_time is not None, rep
    first_w1 = (rec.replica("w", 1).pid, rec.replica("w", 1).start_time)  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rec = sched.store.load(app_id)
        assert rec is not None
        w1 = rec.replica("w", 1)
        if rec.num_restarts == 1 and w1 is not None and w1.app_state == AppState.RUNNING:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"w[1] was not restarted: {rec}")
    assert (w1.pid, w1.start_time) != first_w1
    for k in (0, 1):
        wk = rec.replica("w", k)
        assert wk is not None and wk.pid is not None and wk.start_time is not None
        st = read_stat(wk.pid)
        assert st is not None and st.start_time == wk.start_time
        assert pid_alive(wk.pid, wk.start_time)
        assert not pid_alive(wk.pid, wk.start_time + 1)  # another start time: not ours
    sched.cancel(app_id)


def test_application_retry_policy_restarts_every_replica(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    code = _counting(tmp_path, "me == 'b-0' and starts == 1", then="time.sleep(0.3)")
    app = AppDef(
        "retry-app",
        [py("a", code, num_replicas=2), py("b", code, max_retries=2)],
    )
    app_id = sched.submit(app, FAST)
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert _starts(tmp_path) == {"a-0": 2, "a-1": 2, "b-0": 2}
    d = sched.describe(app_id)
    assert d is not None and d.num_restarts == 1


def test_role_retry_policy_restarts_the_failed_role(sched: LocalScheduler, tmp_path: Path) -> None:
    code = _counting(tmp_path, "me == 'a-1' and starts == 1", then="time.sleep(0.3)")
    a = py("a", code, num_replicas=2, max_retries=1, retry_policy=RetryPolicy.ROLE)
    app_id = sched.submit(AppDef("retry-role", [a, py("b", code)]), FAST)
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert _starts(tmp_path) == {"a-0": 2, "a-1": 2, "b-0": 1}
    d = sched.describe(app_id)
    assert d is not None and d.num_restarts == 1


def test_retries_run_out(sched: LocalScheduler, tmp_path: Path) -> None:
    code = _counting(tmp_path, "True")
    app_id = sched.submit(AppDef("always-fails", [py("r", code, max_retries=2)]), FAST)
    assert wait_done(sched, app_id) == AppState.FAILED
    d = sched.describe(app_id)
    assert d is not None and d.num_restarts == 2
    assert _starts(tmp_path) == {"r-0": 3}
    assert "no retries left: max_retries=2" in d.msg and "failing on purpose" in d.msg


# ---- cancel ------------------------------------------------------------------------------
_SPAWNER = """
    import os, subprocess, sys, time
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    child = subprocess.Popen([sys.executable, "-c", stubborn])
    escapee = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               start_new_session=True)
    time.sleep(0.2)
    with open({pids!r}, "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}} {{escapee.pid}}\\n")
    time.sleep(120)
"""


def test_a_replicas_end_is_recorded_while_a_process_it_left_is_stopped(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    """A replica that exits leaving a process in a session of its own (out of its process
    group, reparented to the supervisor) and deaf to SIGTERM: the supervisor stops that
    process, SIGKILL after the grace period. Meanwhile the record shows the replica's end and
    the app still running; the app's end is recorded once the process is gone."""
    ready = tmp_path / "left.pid"
    child = tmp_path / "left.py"
    child.write_text(textwrap.dedent(f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open({str(ready)!r} + ".tmp", "w") as f:
            f.write(f"{{os.getpid()}}\\n")
        os.rename({str(ready)!r} + ".tmp", {str(ready)!r})
        time.sleep(120)
    """))
    code = f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, {str(child)!r}], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        while not os.path.exists({str(ready)!r}):
            time.sleep(0.01)
    """
    app_id = sched.schedule(sched.submit_dryrun(AppDef("leave", roles=[py("r", code)]),
                                                {"grace_period": 3.0}))
    left = int(wait_for_file(ready))
    seen_ended_replica_in_running_app = False
    while True:
        d = sched.describe(app_id)
        assert d is not None
        (replica,) = d.roles_statuses[0].replicas
        if d.state.is_terminal():
            break
        if replica.state == AppState.SUCCEEDED:
            seen_ended_replica_in_running_app = True
        time.sleep(0.01)
    assert d.state == AppState.SUCCEEDED
    assert gone(left), "the process the replica left is stopped before the app's end"
    assert seen_ended_replica_in_running_app, "the replica's end was recorded first"


def test_cancel_leaves_no_process_behind(sched: LocalScheduler, tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    app_id = sched.submit(AppDef("cancel-me", [py("r", _SPAWNER.format(pids=str(pids_file)))]),
                          FAST)
    pids = [int(p) for p in wait_for_file(pids_file).split()]
    assert not any(gone(p) for p in pids)
    sched.cancel(app_id)
    d = sched.describe(app_id)
    assert d is not None and d.state == AppState.CANCELLED
    assert d.roles_statuses[0].replicas[0].state == AppState.CANCELLED
    # the replica, its SIGTERM-ignoring child and a child in its own session are all gone
    assert wait_gone(pids) == []
    sched.cancel(app_id)  # idempotent
    assert sched.describe(app_id).state == AppState.CANCELLED  # type: ignore[union-attr]


def test_status_logs_and_cancel_from_another_process(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    code = f"""
        import os, time
        print("hello from the replica", flush=True)
        open({str(pids_file)!r}, "w").write(f"{{os.getpid()}}\\n")
        time.sleep(120)
    """
    app_id = sched.submit(AppDef("remote", [py("r", code)]), FAST)
    pid = int(wait_for_file(pids_file))
    res = run_py(
        tmp_path,
        f"""
        import json
        from tether.schedulers.local import create_scheduler
        s = create_scheduler("other")
        before = s.describe({app_id!r}).state.name
        lines = list(s.log_iter({app_id!r}, "r", 0))
        s.cancel({app_id!r})
        after = s.describe({app_id!r}).state.name
        print(json.dumps({{"before": before, "lines": lines, "after": after,
                          "listed": [a.app_id for a in s.list()]}}))
        """,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc == {
        "before": "RUNNING",
        "lines": ["hello from the replica\n"],
        "after": "CANCELLED",
        "listed": [app_id],
    }
    assert sched.describe(app_id).state == AppState.CANCELLED  # type: ignore[union-attr]
    assert wait_gone([pid]) == []


def test_a_detached_run_outlives_its_launcher(sched: LocalScheduler, tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    code = f"import time; time.sleep(2.0); print('result=42'); open({str(marker)!r}, 'w')"
    res = run_py(
        tmp_path,
        f"""
        import sys
        from tether.schedulers.local import create_scheduler
        from tether.specs import AppDef, Role
        s = create_scheduler("launcher")
        role = Role("r", entrypoint=sys.executable, args=["-c", {code!r}])
        print(s.submit(AppDef("detached", [role]), {{}}))
        """,
    )
    assert res.returncode == 0, res.stderr
    app_id = res.stdout.strip()
    assert not marker.exists()  # the launcher has exited; the job still runs
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert marker.exists()
    assert list(sched.log_iter(app_id, "r", 0, streams=Stream.STDOUT)) == ["result=42\n"]


def test_a_killed_supervisor_never_leaves_the_app_running(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    code = f"import os, time; open({str(pids_file)!r}, 'w').write(f'{{os.getpid()}}\\n'); " \
        "time.sleep(120)"
    app_id = sched.submit(AppDef("orphaned", [py("r", code)]), FAST)
    pid = int(wait_for_file(pids_file))
    rec = sched.store.load(app_id)
    assert rec is not None and rec.supervisor_pid is not None
    os.kill(rec.supervisor_pid, signal.SIGKILL)
    assert wait_gone([rec.supervisor_pid]) == []
    state_file = sched.store.state_path(app_id)
    before = state_file.read_bytes()
    d = sched.describe(app_id)
    assert d is not None and d.state == AppState.FAILED
    assert f"supervisor pid {rec.supervisor_pid} died" in d.msg
    rep = d.roles_statuses[0].replicas[0]
    assert rep.state == AppState.FAILED
    assert rep.msg == f"supervisor pid {rec.supervisor_pid} died; exit status of replica unknown"
    assert sched.list()[0].state == AppState.FAILED
    # describe and list are reads: nothing written, nothing stopped
    assert state_file.read_bytes() == before
    assert wait_gone([pid], timeout=0.2) == [pid]
    sched.reconcile(app_id)  # what the Runner's wait and the adapters' pollers call
    assert wait_gone([pid]) == []  # its replica was stopped, not left unsupervised
    assert state_file.read_bytes() != before
    again = state_file.read_bytes()
    sched.reconcile(app_id)  # idempotent
    assert state_file.read_bytes() == again
    d = sched.describe(app_id)
    assert d is not None and d.state == AppState.FAILED


def test_wait_for_change_returns_quickly_after_the_last_process_exits(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    stamp = tmp_path / "exit-time"
    code = f"""
        import os, time
        time.sleep(0.5)
        with open({str(stamp)!r}, "w") as f:
            f.write(repr(time.time()))
        os._exit(0)
    """
    app_id = sched.submit(AppDef("latency", [py("r", code)]), FAST)
    # it returns because the app ended: not before (the app is final at once after it), and
    # not at its 600 s timeout, which would outlast the suite's 300 s test timeout and fail
    # the test (how fast: benchmarks/)
    sched.wait_for_change(app_id, 600.0)
    assert stamp.exists()
    assert sched.describe(app_id).state == AppState.SUCCEEDED  # type: ignore[union-attr]
    sched.wait_for_change(app_id, 600.0)  # a finished app returns at once


# ---- logs --------------------------------------------------------------------------------
def test_logs_have_three_streams_and_keep_every_line_intact(sched: LocalScheduler) -> None:
    code = r"""
        import sys
        out, err = sys.stdout.buffer, sys.stderr.buffer
        out.write(b"out 1\n"); out.flush()
        err.write(b"err 1\n"); err.flush()
        out.write(b"bad \xff\xfe utf8\n"); out.flush()
        out.write(b"progress\r50%\r100%\n"); out.flush()
        err.write(b"no newline at the end")
    """
    app_id = sched.submit(AppDef("logs", [py("r", code)]), FAST)
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert sched.capabilities.streams == frozenset(Stream)
    stdout = list(sched.log_iter(app_id, "r", 0, streams=Stream.STDOUT))
    stderr = list(sched.log_iter(app_id, "r", 0, streams=Stream.STDERR))
    combined = list(sched.log_iter(app_id, "r", 0))
    assert stdout == ["out 1\n", "bad \ufffd\ufffd utf8\n", "progress\r50%\r100%\n"]
    assert stderr == ["err 1\n", "no newline at the end\n"]
    # both streams, whole lines, each in its order (how they interleave depends on timing)
    assert sorted(combined) == sorted(stdout + stderr)
    assert [ln for ln in combined if ln in stdout] == stdout
    assert [ln for ln in combined if ln in stderr] == stderr
    assert list(sched.log_iter(app_id, "r", 0, regex=r"^(out|err) \d")) == ["out 1\n", "err 1\n"]


def test_tailing_follows_the_log_until_the_replica_finishes(sched: LocalScheduler) -> None:
    code = """
        import time
        for i in range(5):
            print(f"line {i}", flush=True)
            time.sleep(0.15)
    """
    app_id = sched.submit(AppDef("tail", [py("r", code)]), FAST)
    got = list(sched.log_iter(app_id, "r", 0, should_tail=True, streams=Stream.STDOUT))
    assert got == [f"line {i}\n" for i in range(5)]
    d = sched.describe(app_id)
    assert d is not None and d.roles_statuses[0].replicas[0].state == AppState.SUCCEEDED


def test_since_and_until_select_lines_by_the_time_they_were_written(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    mid = tmp_path / "mid"
    code = f"""
        import time
        print("early", flush=True)
        time.sleep(0.5)
        open({str(mid)!r}, "w").write(repr(time.time()))
        time.sleep(0.5)
        print("late", flush=True)
    """
    app_id = sched.submit(AppDef("timed", [py("r", code)]), FAST)
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    t = datetime.fromtimestamp(float(mid.read_text()))
    assert list(sched.log_iter(app_id, "r", 0, since=t)) == ["late\n"]
    assert list(sched.log_iter(app_id, "r", 0, until=t)) == ["early\n"]
    assert list(sched.log_iter(app_id, "r", 0, since=t, until=t)) == []
    assert len(list(sched.log_iter(app_id, "r", 0, since=datetime.fromtimestamp(0)))) == 2


def test_bad_role_replica_or_regex_is_a_clear_error(sched: LocalScheduler) -> None:
    app_id = sched.submit(AppDef("names", [py("trainer", "pass", num_replicas=2)]), FAST)
    with pytest.raises(ValueError, match=r"no role 'trainr'; did you mean 'trainer'\?"):
        sched.log_iter(app_id, "trainr", 0)
    with pytest.raises(ValueError, match=r"has no replica 2; valid replica ids: 0\.\.1"):
        sched.log_iter(app_id, "trainer", 2)
    with pytest.raises(ValueError, match="invalid log filter regex"):
        sched.log_iter(app_id, "trainer", 0, regex="(")
    with pytest.raises(ValueError, match="no local_cwd app 'missing-1'"):
        sched.log_iter("missing-1", "trainer", 0)


# ---- render, list, delete ----------------------------------------------------------------
def test_dryrun_renders_every_replica_masks_secrets_and_has_no_side_effects(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    role = py("r", "pass", num_replicas=2, env={"HF_TOKEN": "hf_sekrit_123", "PLAIN": "visible"})
    info = sched.submit_dryrun(AppDef("dry", [role]), {"log_dir": str(tmp_path / "logs")})
    req = info.request
    assert isinstance(req, LocalRequest)
    reps = req.roles["r"]
    assert [r.env["TETHER_REPLICA_ID"] for r in reps] == ["0", "1"]
    assert reps[1].combined == str(tmp_path / "logs" / req.app_id / "r" / "1" / "combined.log")
    text = str(info)
    assert "hf_sekrit_123" not in text and "HF_TOKEN=****" in text and "PLAIN=visible" in text
    assert not (tmp_path / "logs").exists()
    assert not sched.store.apps_dir.exists() or not any(sched.store.apps_dir.iterdir())


def test_list_find_jobs_and_delete(sched: LocalScheduler, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    ids = []
    for key in ("job-1", None, "job-1"):
        meta = {JOB_KEY: key} if key else {}
        app = AppDef("listed", [py("r", "print('x')")], metadata=meta)
        ids.append(sched.submit(app, {"log_dir": str(logs)}))
        time.sleep(0.01)
    for app_id in ids:
        wait_done(sched, app_id)
    listed = sched.list()
    assert [a.app_id for a in listed] == ids
    assert [a.job_key for a in listed] == ["job-1", None, "job-1"]
    assert all(a.name == "listed" and a.state == AppState.SUCCEEDED for a in listed)
    assert [a.app_id for a in sched.find_jobs("job-1")] == [ids[0], ids[2]]
    assert sched.find_jobs("job-2") == []

    sched.delete(ids[0])
    assert sched.describe(ids[0]) is None
    assert not (logs / ids[0]).exists() and (logs / ids[1]).exists()
    assert [a.app_id for a in sched.find_jobs("job-1")] == [ids[2]]
    sched.delete(ids[0])  # idempotent


def test_invalid_requests_are_rejected_before_anything_runs(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="role 'r': entrypoint 'no-such-prog-xyz' is not found"):
        sched.submit_dryrun(AppDef("bad", [Role("r", entrypoint="no-such-prog-xyz")]), {})
    mapped = py("r", "pass")
    mapped.workspace = Workspace({str(tmp_path): "src"})
    with pytest.raises(ValueError, match="role 'r': local_cwd runs replicas in one directory"):
        sched.submit_dryrun(AppDef("bad", [mapped]), {})
    with pytest.raises(ValueError, match="is not a directory"):
        sched.submit_dryrun(AppDef("bad", [py("r", "pass")]), {"cwd": str(tmp_path / "nope")})
    with pytest.raises(InvalidRunConfigException, match="did you mean log_dir"):
        sched.submit_dryrun(AppDef("bad", [py("r", "pass")]), {"logdir": "/tmp"})
    info = sched.submit_dryrun(AppDef("twice", [py("r", "pass")]), {})
    app_id = sched.schedule(info)
    with pytest.raises(ValueError, match="already submitted"):
        sched.schedule(info)
    wait_done(sched, app_id)
    assert sched.describe("not a valid id") is None


def test_cancel_after_the_supervisor_died_stops_the_replica(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    app_id = sched.submit(AppDef("cancel-dead", [py("r", _SPAWNER.format(pids=str(pids_file)))]),
                          FAST)
    pids = [int(p) for p in wait_for_file(pids_file).split()]
    try:
        rec = sched.store.load(app_id)
        assert rec is not None and rec.supervisor_pid is not None
        os.kill(rec.supervisor_pid, signal.SIGKILL)
        assert wait_gone([rec.supervisor_pid]) == []
        sched.cancel(app_id)
        d = sched.describe(app_id)
        assert d is not None and d.state == AppState.CANCELLED
        assert f"supervisor pid {rec.supervisor_pid} had died" in d.msg
        # the replica and its whole process group are stopped
        assert wait_gone(pids[:2]) == []
    finally:
        # a child in its own session was the dead supervisor's to track: stop it here
        os.kill(pids[2], signal.SIGKILL)


def test_ctrl_c_in_the_launchers_terminal_does_not_stop_the_app(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    code = "import time; time.sleep(1.0); print('survived')"
    launcher = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from tether.schedulers.local import create_scheduler
            from tether.specs import AppDef, Role
            role = Role("r", entrypoint=sys.executable, args=["-c", {code!r}])
            print(create_scheduler("x").submit(AppDef("ctrl-c", [role]), {{}}), flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
        # with SIGINT at its default, as in a terminal, also when the suite runs under nohup
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert launcher.stdout is not None
    app_id = launcher.stdout.readline().strip()
    os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C does to the foreground group
    assert launcher.wait(timeout=10) != 0
    assert wait_done(sched, app_id) == AppState.SUCCEEDED
    assert list(sched.log_iter(app_id, "r", 0)) == ["survived\n"]


def test_a_replica_that_cannot_start_fails_the_app(sched: LocalScheduler, tmp_path: Path) -> None:
    script = tmp_path / "prog.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    app = AppDef("vanishing", [Role("r", entrypoint=str(script)), py("other", "pass")])
    info = sched.submit_dryrun(app, FAST)
    script.unlink()  # gone between render and submit
    app_id = sched.schedule(info)
    assert wait_done(sched, app_id) == AppState.FAILED
    d = sched.describe(app_id)
    assert d is not None and f"role 'r' replica 0 could not start {str(script)!r}" in d.msg


def test_a_log_directory_that_cannot_be_made_fails_the_app_naming_it(
    sched: LocalScheduler, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("not a directory")
    log_dir = tmp_path / "file" / "logs"
    app = AppDef("nolog", [Role("r", entrypoint="true", num_replicas=2)])
    app_id = sched.schedule(sched.submit_dryrun(app, {**FAST, "log_dir": str(log_dir)}))
    assert wait_done(sched, app_id) == AppState.FAILED
    d = sched.describe(app_id)
    assert d is not None
    assert "role 'r' replica 0 could not make its log directory" in d.msg, d.msg
    assert str(log_dir) in d.msg and "Not a directory" in d.msg, d.msg


def test_a_supervisor_that_cannot_start_is_an_error_with_its_log(
    sched: LocalScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'supervisor exploded' >&2\nexit 1\n")
    broken.chmod(0o755)
    info = sched.submit_dryrun(AppDef("nosup", [py("r", "pass")]), FAST)
    monkeypatch.setattr(sys, "executable", str(broken))
    with pytest.raises(RuntimeError, match=r"(?s)did not start the replicas.*supervisor exploded"):
        sched.schedule(info)
    d = sched.describe(info.request.app_id)
    assert d is not None and d.state == AppState.FAILED and "supervisor exploded" in d.msg
