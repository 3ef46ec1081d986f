"""Crash consistency of ``local_cwd``: SIGKILL the supervisor at random instants.

Each run submits an app (four long replicas and one that fails at once and is restarted
forever, so the supervisor is always forking), SIGKILLs the supervisor after a random delay
that spans its start-up, the replicas' start and the restarts, or (in 40% of the runs) as
soon as a replica runs that the record does not name yet (between fork and record; the test
counts these kills and requires some), and then asks tether about the
app: ``cancel``, or ``reconcile`` (what the Runner's wait and the adapters' pollers call;
``describe`` itself is a pure read). Afterwards no process of the app may be left alive and the
app must be in a final state. Figures are printed (run pytest with ``-s`` to see them) and
recorded in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.schedulers.local.proctable import pid_alive
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, RetryPolicy, Role

RUNS = int(os.environ.get("TETHER_CRASH_RUNS", "100"))
"""Runs of the randomized crash test (>= 100 by default)."""


def cmdlines() -> Iterator[tuple[int, str]]:
    """``(pid, command line)`` of every live (non-zombie) process."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        yield int(name), cmd


def matching(*needles: str) -> list[int]:
    """Pids of live processes whose command line contains one of ``needles``, or (for a
    supervisor forked by the supervisor host, whose command line is the host's) whose working
    directory is a needle."""
    me = os.getpid()
    dirs = {n for n in needles if os.path.isabs(n)}
    out = []
    for pid, cmd in cmdlines():
        if pid == me:
            continue
        if any(n in cmd for n in needles):
            out.append(pid)
        elif dirs:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd") in dirs:
                    out.append(pid)
    return out


def survivors(needles: tuple[str, ...], timeout: float = 5.0) -> list[int]:
    """The processes matching ``needles`` still alive after ``timeout`` (polled)."""
    deadline = time.monotonic() + timeout
    while True:
        left = matching(*needles)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_supervisor(sched: LocalScheduler, app_id: str, state_path: str) -> bool:
    """SIGKILLs the app's supervisor, whatever stage it is in.

    Returns:
        True once no supervisor of the app runs (killed now or earlier).
    """
    rec = sched.store.load(app_id)
    if rec is not None and rec.supervisor_pid is not None:
        if pid_alive(rec.supervisor_pid, rec.supervisor_start_time):
            kill_all([rec.supervisor_pid])  # only it: what it forked must be found by tether
            deadline = time.monotonic() + 10
            while pid_alive(rec.supervisor_pid, rec.supervisor_start_time):
                assert time.monotonic() < deadline, "SIGKILL did not end the supervisor"
                time.sleep(0.005)
        return True
    # not recorded yet: no replica can exist; kill both halves of the supervisor's fork
    # (started as its own process: its command line names the state file; forked by the
    # supervisor host: it runs in the app's directory)
    pids = matching(state_path, os.path.realpath(os.path.dirname(state_path)))
    kill_all(pids)
    return bool(pids)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (``/proc/PID/task/*/children``)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    return out


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ('' when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def unrecorded(sched: LocalScheduler, app_id: str, marker: str, kill: bool = False) -> list[int]:
    """Live replicas of the app that its record does not name yet: forked, not recorded.

    Args:
        sched: The scheduler.
        app_id: The app.
        marker: In the command line of each of its replicas.
        kill: SIGKILL the supervisor at once when there are some (the window is short).

    Returns:
        Their pids, when the record still holds the intent (a replica ``launching``).
    """
    rec = sched.store.load(app_id)
    if rec is None or not any(r.launching for r in rec.replicas):
        return []
    recorded = {r.pid for r in rec.replicas if r.pid is not None}
    if kill and rec.supervisor_pid is not None:  # fast: only the supervisor's children
        live = [pid for pid in children(rec.supervisor_pid) if marker in cmdline(pid)]
    else:
        live = matching(marker)
    found = [pid for pid in live if pid not in recorded]
    if found and kill and rec.supervisor_pid is not None:
        kill_all([rec.supervisor_pid])
    return found


def crash_app(marker: str) -> AppDef:
    loop = "while :; do sleep 1; done"
    return AppDef(
        "crash",
        roles=[
            Role("w", entrypoint="sh", args=["-c", loop, marker], num_replicas=4),
            Role(
                "f",
                entrypoint="sh",
                args=["-c", "exit 3", marker],
                max_retries=1000,
                retry_policy=RetryPolicy.REPLICA,
            ),
        ],
    )


@pytest.mark.slow
@pytest.mark.parametrize("host", ["host", "own-process"])
def test_sigkill_supervisor_at_random_instants_leaves_no_orphan_and_no_stuck_app(
    tether_state_dir: Path, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways a supervisor starts: forked by the supervisor host, or as its own process."""
    monkeypatch.setenv("TETHER_LOCAL_SUPERVISOR_HOST", "1" if host == "host" else "0")
    sched: LocalScheduler = create_scheduler("crash")
    cfg = {"grace_period": 0.2}
    rng = random.Random(int(os.environ.get("TETHER_CRASH_SEED", "0")) or None)
    orphans = stuck = 0
    before_pid = in_launch = after_fork = 0
    details: list[str] = []
    # calibrate: how long until the supervisor records the replicas started (schedule
    # returns before, once the supervisor claimed the app)
    marker = f"tether-crash-{uuid.uuid4().hex}"
    info = sched.submit_dryrun(crash_app(marker), cfg)
    t0 = time.monotonic()
    app_id = sched.schedule(info)
    wait_started(sched.store, app_id)
    span = 2.0 * (time.monotonic() - t0)
    sched.cancel(app_id)
    assert not survivors((marker,))
    for run in range(RUNS):
        marker = f"tether-crash-{uuid.uuid4().hex}"
        info = sched.submit_dryrun(crash_app(marker), cfg)
        app_id = info.request.app_id
        state_path = str(sched.store.state_path(app_id))
        errors: list[BaseException] = []

        def launch(info: object = info, errors: list[BaseException] = errors) -> None:
            try:
                sched.schedule(info)  # type: ignore[arg-type]
            except RuntimeError as e:  # the supervisor died while starting: reported
                errors.append(e)

        th = threading.Thread(target=launch)
        th.start()
        if run % 2 and rng.random() < 0.8:
            # aimed at the fork/record window: kill as soon as a replica runs that the
            # record does not name yet (the launch, or a restart of the failing role)
            aim = time.monotonic() + 5
            while time.monotonic() < aim:  # no sleep between looks: the window is short
                hit = unrecorded(sched, app_id, marker, kill=True)
                if hit:
                    # SIGKILLed while these ran unrecorded: tether must find them anyway
                    after_fork += 1
                    break
        else:
            time.sleep(rng.uniform(0.0, span))
        deadline = time.monotonic() + 60
        killed = False
        while time.monotonic() < deadline:
            killed = kill_supervisor(sched, app_id, state_path) or killed
            if killed and not th.is_alive():
                break
            th.join(0.005)
        assert not th.is_alive(), f"run {run}: schedule() hung after the supervisor died"
        kill_supervisor(sched, app_id, state_path)
        rec = sched.store.load(app_id)
        assert rec is not None
        before_pid += rec.supervisor_pid is None
        # killed between the durable intent and the confirmation
        in_launch += any(r.launching for r in rec.replicas) and rec.app_state.name in (
            "SUBMITTED", "RUNNING"
        )
        if run % 2:
            sched.cancel(app_id)
        else:
            sched.reconcile(app_id)
        d = sched.describe(app_id)
        assert d is not None
        if not d.state.is_terminal():
            stuck += 1
            rec = sched.store.load(app_id)
            assert rec is not None
            sup = rec.supervisor_pid
            details.append(
                f"run {run}: {app_id} stuck {d.state.name}; supervisor {sup} "
                f"alive={sup is not None and pid_alive(sup, rec.supervisor_start_time)}"
            )
            sched.cancel(app_id)
        left = survivors((marker, state_path, os.path.realpath(os.path.dirname(state_path))))
        if left:
            orphans += len(left)
            details.append(f"run {run}: {app_id} left {len(left)} process(es) running")
            kill_all(left)
    print(
        f"\n[crash-injection] runs={RUNS} kill-window={span:.3f}s "
        f"killed-before-supervisor-recorded={before_pid} killed-while-launching={in_launch} "
        f"killed-between-fork-and-record={after_fork} orphans={orphans} stuck={stuck}"
    )
    assert (orphans, stuck) == (0, 0), "\n".join(details)
    # the kills really hit the window the crash consistency is about
    assert after_fork > 0, after_fork
    if host == "own-process":
        # a supervisor forked by the host claims the app within milliseconds of the fork:
        # test_local_host.py hits that window on purpose (it holds the app's lock)
        assert before_pid > 0, before_pid


LAUNCHER = textwrap.dedent(
    """
    import sys
    from tether.schedulers.local.scheduler import create_scheduler
    from tether.specs import AppDef, Role
    s = create_scheduler("crash")
    app = AppDef("early", roles=[Role("w", entrypoint="sh",
                 args=["-c", "while :; do sleep 1; done", sys.argv[1]], num_replicas=2)])
    info = s.submit_dryrun(app, {"grace_period": 0.2})
    print(info.request.app_id, flush=True)
    s.schedule(info)
    """
)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2, 0.4])
def test_launcher_and_supervisor_dying_early_is_detected_at_once(delay: float) -> None:
    """Both the launching process and the supervisor die: the app is not SUBMITTED for 120 s."""
    marker = f"tether-crash-{uuid.uuid4().hex}"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, marker], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    app_id = launcher.stdout.readline().strip()
    time.sleep(delay)
    launcher.kill()
    launcher.wait()
    sched = create_scheduler("crash")
    state_path = str(sched.store.state_path(app_id))
    kill_all(matching(state_path))
    kill_supervisor(sched, app_id, state_path)  # the half that had forked meanwhile, if any
    assert not survivors((state_path,))
    d = sched.describe(app_id)
    try:
        assert d is None or d.state.is_terminal(), d  # None: killed before the record
        sched.reconcile(app_id)
    finally:
        sched.cancel(app_id)
        left = survivors((marker,))
        kill_all(left)
    assert not left
