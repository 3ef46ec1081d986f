"""``local_cwd`` when the supervisor runs out of file descriptors (``RLIMIT_NOFILE``).

The limit of a running supervisor is lowered (``prlimit``) to the descriptors it holds, so
the next process it starts fails with ``EMFILE``: replicas that run keep running, the restart
waits (the status says why, with what to do) and happens once descriptors are free, and the
record ends with the real outcome. An app too large for the hard limit is refused before
anything starts, with the numbers.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.schedulers.api import DescribeAppResponse
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, AppState, RetryPolicy, Role

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def wait_for(
    s: LocalScheduler, app_id: str, done: Callable[[DescribeAppResponse], bool]
) -> DescribeAppResponse:
    """Polls ``describe`` until ``done`` (bounded: 60 s)."""
    for _ in range(240):
        d = s.describe(app_id)
        assert d is not None
        if done(d):
            return d
        s.wait_for_change(app_id, 0.25)
    raise AssertionError(f"{app_id}: not there after 60 s: {s.describe(app_id)}")


def _waiting(d: DescribeAppResponse) -> str:
    msgs = [r.msg for rs in d.roles_statuses for r in rs.replicas]
    return next((m for m in msgs if m.startswith("waiting to restart:")), "")


def test_out_of_fds_a_restart_waits_while_running_replicas_keep_running(tmp_path: Path) -> None:
    s = create_scheduler("nofile")
    go, release, flag = tmp_path / "go", tmp_path / "release", tmp_path / "failed-once"
    # w: runs until the test releases it; f: fails once (when told), then succeeds
    busy = f"while [ ! -e {release} ]; do echo tick; sleep 0.1; done; echo done"
    once = (f"[ -e {flag} ] && exit 0; touch {flag}; "
            f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3")
    app = AppDef("nofile", roles=[
        Role("w", entrypoint="sh", args=["-c", busy], num_replicas=2),
        Role("f", entrypoint="sh", args=["-c", once], max_retries=3,
             retry_policy=RetryPolicy.REPLICA),
    ])
    app_id = s.schedule(s.submit_dryrun(app, {"grace_period": 0.5}))
    rec = s.store.load(app_id)
    assert rec is not None and rec.supervisor_pid is not None
    # a stream's log is made with its first byte: let w's exist before descriptors run out
    outs = [Path(r.stdout) for r in rec.replicas if r.role == "w"]
    for _ in range(600):
        if all(p.exists() and p.stat().st_size for p in outs):
            break
        s.wait_for_change(app_id, 0.1)
    assert all(p.exists() for p in outs), outs
    # no descriptor left: f's exit frees its 8, fewer than starting a process takes
    held = len(os.listdir(f"/proc/{rec.supervisor_pid}/fd"))
    resource.prlimit(rec.supervisor_pid, resource.RLIMIT_NOFILE, (held, held))
    go.touch()
    d = wait_for(s, app_id, lambda d: bool(_waiting(d)) or d.state.is_terminal())
    waiting = _waiting(d)
    assert "ran out of file descriptors" in waiting and "ulimit -n" in waiting, waiting
    assert f"open-file limit {held}" in waiting
    running = [r.state for rs in d.roles_statuses if rs.role == "w" for r in rs.replicas]
    assert running == [AppState.RUNNING, AppState.RUNNING]  # not killed for it
    release.touch()  # w ends, its descriptors are freed: the restart happens
    d = wait_for(s, app_id, lambda d: d.state.is_terminal())
    assert d.state == AppState.SUCCEEDED, d
    states = {(rs.role, r.id): r.state for rs in d.roles_statuses for r in rs.replicas}
    assert set(states.values()) == {AppState.SUCCEEDED}, states
    rec = s.store.load(app_id)
    assert rec is not None
    f0 = rec.replica("f", 0)
    assert f0 is not None and f0.attempts == 2 and f0.exit_code == 0
    lines = Path(f0.stderr).read_text().splitlines()
    assert [ln for ln in lines if ln.startswith("[tether] restarting f[0]")] == [lines[0]]
    assert "delayed: the supervisor ran out of file descriptors" in lines[0]
    assert "cannot restart f[0] yet" in Path(rec.supervisor_log).read_text()
    w0 = rec.replica("w", 0)
    assert w0 is not None and Path(w0.stdout).read_text().endswith("done\n")
    print(f"\n[nofile] supervisor limited to {held} fds: restart delayed, replicas kept running, "
          f"app {d.state.name}")


TOO_BIG = textwrap.dedent(
    """
    import resource, sys
    from tether.schedulers.local.scheduler import create_scheduler
    from tether.specs import AppDef, Role
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
    s = create_scheduler("nofile")
    app = AppDef("big", roles=[Role("w", entrypoint="true", num_replicas=10)])
    try:
        s.submit_dryrun(app, {})
    except ValueError as e:
        print(e)
    print(len(s.list()), "apps")
    """
)


def test_an_app_too_large_for_the_hard_fd_limit_is_refused_with_the_numbers() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", TOO_BIG], capture_output=True, text=True, timeout=120,
        check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    msg, listed = proc.stdout.strip().splitlines()
    assert msg == (
        "app 'big': 10 replicas need about 144 open files in the local supervisor "
        "(8 per replica + 64), but the hard open-file limit (RLIMIT_NOFILE) is 40: "
        "raise it (ulimit -Hn) or run fewer replicas"
    )
    assert listed == "0 apps"
