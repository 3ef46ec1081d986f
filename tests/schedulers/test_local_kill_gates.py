"""SIGKILL of a ``local_cwd`` supervisor at each step of its launch, hit exactly, every run.

A gate (:mod:`tether.schedulers.local.gates`) holds the supervisor of an app of 8 replicas at
one step: claimed, about to fork replica k, replica k forked but not ``exec``'ed (held in the
child), replica k running but unrecorded, every replica running but unrecorded. ``schedule``
has returned by then (it returns once the claim is on disk). The test kills the supervisor
there and cancels the app, as a user would. Then no process of the app may be left, whatever
instant the supervisor died at: a child held before its ``exec`` must be gone before its gate
opens (else it would run its replica as an orphan), and no replica may run. Both ways a
supervisor starts are covered: forked by the supervisor host, and as its own process.

Also here: what ``describe``, ``log_iter`` and ``cancel`` do right after ``schedule``
returned, while the replicas are not started yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from tether.schedulers.local import host
from tether.schedulers.local.gates import GATES_DIR
from tether.schedulers.local.proctable import pid_alive
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, AppState, Role

REPLICAS = 8
STEPS = [
    "claimed",
    "spawn-r-0",
    "exec-r-0",
    "spawned-r-0",
    "spawn-r-4",
    "exec-r-4",
    "spawned-r-4",
    "exec-r-7",
    "spawned-r-7",
    "started",
]


def app(marker: str) -> AppDef:
    """8 replicas that would run for 10 minutes (a shell and its ``sleep`` each, ``marker``
    in their environment)."""
    return AppDef("gated", roles=[Role("r", entrypoint="sh", num_replicas=REPLICAS,
                                       args=["-c", "sleep 600; echo", marker],
                                       env={"TETHER_TEST_GATE_MARKER": marker})])


def carrying(marker: str) -> list[int]:
    """Live (non-zombie) processes with ``marker`` in their command line or environment."""
    needle = marker.encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            if needle in cmd or needle in env:
                out.append(int(name))
    return out


def held_at(gates: Path, step: str, errors: list[BaseException]) -> int:
    """The pid of the process held at ``step``, once one is (``schedule`` may have returned
    meanwhile: it returns once the supervisor claimed the app, before the replicas start)."""
    held = gates / f"{step}.held"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError, ValueError):
            return int(held.read_text())
        assert not errors, f"the launch failed before the step was reached: {errors}"
        assert time.monotonic() < deadline, f"no process reached the gate {step}"
        time.sleep(0.005)


def gated_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> LocalScheduler:
    """A scheduler whose apps are held at ``step`` (the gate is made with the app's record,
    before the supervisor starts)."""
    s = create_scheduler("gates", state_dir=tmp_path)
    create = s.store.create

    def create_gated(record: object) -> None:
        create(record)  # type: ignore[arg-type]
        gates = s.store.app_dir(record.app_id) / GATES_DIR  # type: ignore[attr-defined]
        gates.mkdir()
        (gates / step).touch()

    monkeypatch.setattr(s.store, "create", create_gated)
    return s


@pytest.mark.parametrize("via", ["host", "own-process"])
@pytest.mark.parametrize("step", STEPS)
def test_a_supervisor_killed_at_any_step_of_its_launch_leaves_no_process(
    step: str, via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(host.ENABLE_ENV, "1" if via == "host" else "0")
    marker = f"tether-gate-{uuid.uuid4().hex}"
    s = gated_scheduler(tmp_path, monkeypatch, step)
    info = s.submit_dryrun(app(marker), {"grace_period": 0.5})
    app_id = info.request.app_id
    gates = s.store.app_dir(app_id) / GATES_DIR
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            s.schedule(info)
        except BaseException as e:  # looked at below
            errors.append(e)

    th = threading.Thread(target=launch)
    th.start()
    try:
        held = held_at(gates, step, errors)
        # the app is claimed (on disk) at every step: schedule() has returned, or does now
        th.join(60)
        assert not th.is_alive() and errors == [], f"schedule() did not return: {errors}"
        rec = s.store.load(app_id)
        assert rec is not None and rec.supervisor_pid is not None, "claimed before any step"
        sup = rec.supervisor_pid
        os.kill(sup, signal.SIGKILL)
        while pid_alive(sup):
            time.sleep(0.005)
        d = s.describe(app_id)  # a read: failed, with the cause, before anyone reconciles
        assert d is not None and d.state == AppState.FAILED, d
        assert f"supervisor pid {sup} died" in d.msg, d.msg
        s.cancel(app_id)  # what a user does next
        if held != sup:  # a child held before its exec: it must not get to run the replica
            assert not pid_alive(held), f"the fork of {step} survived its supervisor"
    finally:
        with contextlib.suppress(FileNotFoundError):
            (gates / step).unlink()  # opens the gate (a survivor would go on now)
        th.join(120)
    left = carrying(marker)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes of the app outlived it: {left}"
    d = s.describe(app_id)
    assert d is not None and d.state in (AppState.FAILED, AppState.CANCELLED), d
    assert "the app's processes are stopped" in d.msg or "had died" in d.msg, d.msg


@pytest.mark.parametrize("via", ["host", "own-process"])
@pytest.mark.parametrize("step", ["claimed", "spawned-r-0"])
def test_an_app_schedule_returned_reads_pending_and_a_cancel_keeps_it_from_starting(
    step: str, via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``schedule`` returns once the supervisor claimed the app, before the replicas start
    (the supervisor is held right after its claim, or once replica 0 runs). Until the
    replicas are recorded started, ``describe`` shows the app SUBMITTED with every replica
    PENDING and ``log_iter`` gives no lines (no error); a cancel then stops the app, and no
    replica that had not started yet starts."""
    from tether.schedulers.local import procs

    monkeypatch.setenv(host.ENABLE_ENV, "1" if via == "host" else "0")
    marker = f"tether-gate-{uuid.uuid4().hex}"
    ran = tmp_path / "ran"
    ran.mkdir()
    s = gated_scheduler(tmp_path / "state", monkeypatch, step)
    job = AppDef("early", roles=[Role(
        "r", entrypoint="sh", num_replicas=3,
        args=["-c", f'touch {ran}/"$TETHER_REPLICA_ID"; sleep 600; echo {marker}'])])
    info = s.submit_dryrun(job, {"grace_period": 0.5})
    app_id = info.request.app_id
    gates = s.store.app_dir(app_id) / GATES_DIR
    returned: list[str] = []
    launch = threading.Thread(target=lambda: returned.append(s.schedule(info)))
    launch.start()
    try:
        launch.join(60)  # the supervisor stays held: schedule() must not wait for it
        assert returned == [app_id], "schedule() waited for the replicas to start"
        sup = held_at(gates, step, [])
        d = s.describe(app_id)
        assert d is not None and d.state == AppState.SUBMITTED, d
        assert [r.state for rs in d.roles_statuses for r in rs.replicas] == [
            AppState.PENDING
        ] * 3
        assert list(s.log_iter(app_id, "r", 2)) == []
        # cancel (it waits for the supervisor to stop the app); the gate opens once the
        # supervisor was signalled: the next thing it does is look at its signals
        signalled = threading.Event()
        kill = os.kill

        def kill_then_tell(pid: int, sig: int) -> None:
            kill(pid, sig)
            if pid == sup:
                signalled.set()

        cancel = threading.Thread(target=s.cancel, args=(app_id,))
        with monkeypatch.context() as m:
            m.setattr(procs.os, "kill", kill_then_tell)
            cancel.start()
            assert signalled.wait(60), "cancel did not signal the supervisor"
    finally:
        with contextlib.suppress(FileNotFoundError):
            (gates / step).unlink()
        launch.join(60)
    cancel.join(60)
    assert not cancel.is_alive(), "cancel did not return"
    d = s.describe(app_id)
    assert d is not None and d.state == AppState.CANCELLED, d
    assert [r.state for rs in d.roles_statuses for r in rs.replicas] == [
        AppState.CANCELLED
    ] * 3
    assert not pid_alive(sup)
    started = {"claimed": set(), "spawned-r-0": {"0"}}[step]  # (0 may be stopped first)
    assert {p.name for p in ran.iterdir()} <= started, "a replica started after the cancel"
    assert carrying(marker) == []
