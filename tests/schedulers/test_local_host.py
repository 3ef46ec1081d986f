"""The supervisor host of ``local_cwd``: supervisors are forks of one waiting process.

What a user relies on: an app started through the host behaves as one started by its own
supervisor process (the launcher's environment, umask and working directories, not the
host's), the host serves only its own user, a host of older code is replaced, and killing
the host at any instant of a launch leaves no orphan, no stuck app and no duplicate replica.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import resource
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tether.schedulers.local import host
from tether.schedulers.local.proctable import pid_alive, read_stat
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, AppState, Role

FAST = {"grace_period": 0.2}
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _host_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The supervisor host on, and one of this test process alone.

    Launchers share a host when their supervisors would be identical, resource limits
    included. Other test runs on the machine (CI runs its groups side by side) launch through
    the host too, starting one when there is none: these tests count hosts, and kill theirs.
    So this process launches with a message-queue limit (a soft limit, which nothing here
    uses) that no other process has, and so a host address of its own.
    """
    monkeypatch.setenv(host.ENABLE_ENV, "1")
    before = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    top = before[1] if before[1] != resource.RLIM_INFINITY else 1 << 40
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (top - 1 - os.getpid() % top, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, before)


def host_pids() -> list[int]:
    """Live hosts serving this process's address. Its forks have the same command line and
    are told apart: the supervisors and the spare by their names, a fork being made (not
    named yet) by its parent, the host."""
    name = host.address()[1:].decode()
    found: dict[int, int] = {}  # pid -> parent
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            stat = read_stat(int(entry))
            with open(f"/proc/{entry}/comm", "rb") as f:
                comm = f.read().strip()
            if (name.encode() in cmd and comm not in (host.SUPERVISOR_NAME, host.SPARE_NAME)
                    and stat is not None and not stat.dead):
                found[int(entry)] = stat.ppid
    return sorted(pid for pid, parent in found.items() if parent not in found)


def spare_pids() -> list[int]:
    """Live spares of the host serving this process's address. The host's first fork has
    the spare's name too until it exits (it forks the spare): a child of a host is not one."""
    name = host.address()[1:]
    hosts = set(host_pids())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/comm", "rb") as f:
                if f.read().strip() != host.SPARE_NAME:
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            stat = read_stat(int(entry))
            if name in cmd and stat is not None and not stat.dead and stat.ppid not in hosts:
                out.append(int(entry))
    return out


def eventually(what: str, check: Callable[[], T], timeout: float = 30.0) -> T:
    """``check()`` once it is truthy (looked at every 10 ms, for ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
    return value


def finish(s: LocalScheduler, app_id: str) -> AppState:
    for _ in range(300):
        d = s.describe(app_id)
        assert d is not None
        if d.state.is_terminal():
            return d.state
        s.wait_for_change(app_id, 1.0)
    raise AssertionError(f"{app_id} did not finish")


def output(s: LocalScheduler, app_id: str, role: str) -> str:
    return "".join(s.log_iter(app_id, role, 0))


def test_an_app_gets_the_launchers_environment_umask_and_directories_not_the_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = create_scheduler("host")
    monkeypatch.setenv("TETHER_HOST_ONLY", "the first launcher's")
    app = AppDef("one", roles=[Role("r", entrypoint="sleep", args=["30"])])
    first = s.schedule(s.submit_dryrun(app, FAST))
    hosts = host_pids()
    assert len(hosts) == 1, "the first launch starts one host"
    with open(f"/proc/{hosts[0]}/environ", "rb") as f:
        assert b"TETHER_HOST_ONLY=" in f.read(), "started with the first launcher's variables"
    rec = s.store.load(first)
    assert rec is not None and rec.supervisor_pid is not None
    assert rec.supervisor_pid not in hosts, "the supervisor is a fork, not the host itself"
    with open(f"/proc/{rec.supervisor_pid}/comm", "rb") as f:
        assert f.read().strip() == b"tether-sup", "named so that ps and top tell it apart"
    s.cancel(first)
    assert finish(s, first) == AppState.CANCELLED

    # what the launcher has now differs from what the host was started with
    monkeypatch.setenv("TETHER_HOST_PROBE", f"launcher-{uuid.uuid4().hex}")
    monkeypatch.delenv("TETHER_HOST_ONLY")
    work = tmp_path / "work"
    work.mkdir()
    old = os.umask(0o027)
    try:
        script = 'echo "$TETHER_HOST_PROBE $(umask) $(pwd) ${TETHER_HOST_ONLY-unset}"; touch made'
        app = AppDef("two", roles=[Role("r", entrypoint="sh", args=["-c", script])])
        app_id = s.schedule(s.submit_dryrun(app, {**FAST, "cwd": str(work)}))
    finally:
        os.umask(old)
    assert finish(s, app_id) == AppState.SUCCEEDED
    assert host_pids() == hosts, "the second launch used the same host"
    probe, umask, cwd, host_only = output(s, app_id, "r").split()
    assert probe == os.environ["TETHER_HOST_PROBE"]
    assert host_only == "unset", "a variable the launcher no longer has is not passed on"
    assert umask == "0027"
    assert os.path.realpath(cwd) == os.path.realpath(work)
    assert (work / "made").stat().st_mode & 0o777 == 0o640


def test_the_host_a_launch_started_is_no_process_of_that_app(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The host outlives every app: it must not carry the id of the app whose launch started
    it, or that app would look alive (a dead launcher and supervisor not detected) and
    stopping the app's processes would stop the host."""

    from tether.schedulers.local.procs import app_processes

    # settings of our own (a soft limit), so that this launch starts a host of its own
    monkeypatch.setenv(host.IDLE_ENV, "2")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        for lowered in random.sample(range(soft - 200, soft), 200):
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
            if not host_pids():  # no host has these settings: the launch starts one
                break
        assert host_pids() == []
        s = create_scheduler("host")
        app = AppDef("first", roles=[Role("r", entrypoint="sleep", args=["30"])])
        app_id = s.schedule(s.submit_dryrun(app, FAST))
        hosts = host_pids()
        assert len(hosts) == 1, "this launch started the host"
        assert not {p.pid for p in app_processes(app_id)} & set(hosts)
        # the app's supervisor dies: recovering the app stops its processes, not the host
        rec = s.store.load(app_id)
        assert rec is not None and rec.supervisor_pid is not None
        os.kill(rec.supervisor_pid, signal.SIGKILL)
        assert finish(s, app_id) == AppState.FAILED
        s.reconcile(app_id)
        assert s.describe(app_id).state == AppState.FAILED  # type: ignore[union-attr]
        assert host_pids() == hosts
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_host_serves_only_its_own_user(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to connect as another user")
    s = create_scheduler("host")
    app_id = s.schedule(s.submit_dryrun(AppDef("one", roles=[Role("r", entrypoint="true")]), FAST))
    finish(s, app_id)
    state = tmp_path / "x" / "state.json"
    msg = json.dumps({"state": str(state), "cwd": "/", "log": "/dev/null", "env": {},
                      "umask": 0o22}).encode()
    addr = host.address()  # this user's host
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # another user asks the host to supervise a state file it names
        answer = b"?"
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(addr)
            try:
                c.sendall(struct.pack("!I", len(msg)) + msg)
                c.settimeout(5)
                answer = c.recv(1) or b"-"
            except (BrokenPipeError, ConnectionResetError):  # hung up, the request unread
                answer = b"-"
        finally:
            os.write(w, answer)
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b"-", "the host hung up without forking anything"


def test_a_launcher_never_talks_to_a_socket_another_user_holds() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to listen as another user")
    for pid in host_pids():  # make room: the address is taken by an impostor below
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    addr = host.address()
    impostor = textwrap.dedent(
        """
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(bytes.fromhex(sys.argv[1]))
        os.setgid(65534); os.setuid(65534)
        s.listen(8)  # the credentials a peer sees are those at listen()
        print("listening", flush=True)
        c, _ = s.accept()
        c.settimeout(5)
        try:
            data = c.recv(65536)
        except OSError:
            data = b""
        print("got", len(data), flush=True)
        """
    )
    deadline = time.monotonic() + 10
    while host_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = subprocess.Popen([sys.executable, "-c", impostor, addr.hex()], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "listening"
        s = create_scheduler("host")
        app_id = s.schedule(
            s.submit_dryrun(AppDef("one", roles=[Role("r", entrypoint="true")]), FAST)
        )
        assert finish(s, app_id) == AppState.SUCCEEDED, "started without the host"
        assert proc.stdout.readline().strip() == "got 0", "the launcher sent nothing"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("changed", ["status.py", "host.py"])
def test_a_host_of_older_code_is_replaced(tmp_path: Path, changed: str) -> None:
    s = create_scheduler("host")
    app_id = s.schedule(s.submit_dryrun(AppDef("one", roles=[Role("r", entrypoint="true")]), FAST))
    finish(s, app_id)
    (old_host,) = host_pids()
    # tether's code changes on disk (an upgrade, an edit): the host would run old code.
    # host.py too, although the host runs it as __main__ (python -m)
    module = Path(host.__file__).with_name(changed)
    st = module.stat()
    try:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        app_id = s.schedule(
            s.submit_dryrun(AppDef("two", roles=[Role("r", entrypoint="true")]), FAST)
        )
        assert finish(s, app_id) == AppState.SUCCEEDED
        deadline = time.monotonic() + 10
        while pid_alive(old_host) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(old_host), "the old host exited"
        new = host_pids()
        assert len(new) == 1 and new != [old_host], "a current host took over"
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_request_that_is_not_one_does_not_end_the_host() -> None:
    s = create_scheduler("host")
    app_id = s.schedule(s.submit_dryrun(AppDef("one", roles=[Role("r", entrypoint="true")]), FAST))
    finish(s, app_id)
    (pid,) = host_pids()
    for junk in (b"", b"\x00\x00\x00\x05{{{{{", struct.pack("!I", 1 << 30), b"\x00\x00\x00\x02[]"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(host.address())
            c.sendall(junk)
            c.shutdown(socket.SHUT_WR)
            c.settimeout(15)
            assert c.recv(1) == b"", f"{junk!r}: nothing forked"
    assert host_pids() == [pid]
    app_id = s.schedule(s.submit_dryrun(AppDef("two", roles=[Role("r", entrypoint="true")]), FAST))
    assert finish(s, app_id) == AppState.SUCCEEDED
    assert host_pids() == [pid]


def counting_app(marker: str, replicas: int) -> AppDef:
    """An app whose every replica run appends a line to ``/tmp/<marker>.runs``."""
    return AppDef("c", roles=[Role("r", entrypoint="sh",
                                   args=["-c", f"echo ran >> {marker}.runs", marker],
                                   num_replicas=replicas)])


def runs_of(marker: str) -> list[str]:
    """The lines the replicas of :func:`counting_app` wrote (the file is removed)."""
    runs = Path("/tmp", f"{marker}.runs")
    lines = runs.read_text().split() if runs.exists() else []
    runs.unlink(missing_ok=True)
    return lines


@pytest.mark.slow
def test_sigkill_of_the_host_at_random_instants_leaves_one_run_of_each_app() -> None:
    """The host dies anywhere in a launch: the app runs once (by a supervisor the launcher
    starts itself, or the fork that got away), or fails with a reason; nothing is left."""
    s = create_scheduler("host")
    rng = random.Random(int(os.environ.get("TETHER_CRASH_SEED", "0")) or None)
    warm = s.schedule(s.submit_dryrun(AppDef("w", roles=[Role("r", entrypoint="true")]), FAST))
    finish(s, warm)
    ran = failed = 0
    for run in range(30):
        marker = f"tether-host-crash-{uuid.uuid4().hex}"
        info = s.submit_dryrun(counting_app(marker, 3), {**FAST, "cwd": "/tmp"})
        errors: list[BaseException] = []

        def launch(info: object = info, errors: list[BaseException] = errors) -> None:
            try:
                s.schedule(info)  # type: ignore[arg-type]
            except RuntimeError as e:
                errors.append(e)

        hosts = host_pids()
        th = threading.Thread(target=launch)
        th.start()
        time.sleep(rng.uniform(0.0, 0.02))
        for pid in hosts:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        th.join(60)
        assert not th.is_alive(), f"run {run}: schedule() hung after the host died"
        state = finish(s, info.request.app_id)
        lines = runs_of(marker)
        if state == AppState.SUCCEEDED:
            ran += 1
            assert len(lines) == 3, f"run {run}: each replica ran exactly once: {lines}"
        else:
            failed += 1
            assert errors or state == AppState.FAILED
            assert len(lines) <= 3
    print(f"\n[host-crash] runs=30 succeeded={ran} failed={failed}")
    assert ran > 0


def forked_supervisor(app_dir: Path) -> int | None:
    """The pid of a supervisor forked by the host for the app (it runs in the app's
    directory), if one runs."""
    want = os.path.realpath(app_dir)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/comm", "rb") as f:
                if f.read().strip() != host.SUPERVISOR_NAME:
                    continue
            if os.readlink(f"/proc/{entry}/cwd") == want:
                return int(entry)
    return None


def waiting_for_lock(lock: Path, pid: int) -> bool:
    """Whether process ``pid`` is blocked in ``flock`` on the file ``lock`` (``/proc/locks``
    lists a blocked request as ``N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...``)."""
    ino = os.stat(lock).st_ino
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if (len(fields) > 6 and fields[1:3] == ["->", "FLOCK"] and int(fields[5]) == pid
                    and int(fields[6].rsplit(":", 1)[1]) == ino):
                return True
    return False


def test_a_forked_supervisor_killed_before_it_claims_the_app_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window between the host's fork and the supervisor's claim, hit every time: the
    test takes the app's lock as soon as the app's record exists, before the launcher asks
    the host to fork, so the forked supervisor blocks on its claim. Once it is seen blocked
    in ``flock``, the test kills it and lets go. The launcher starts a supervisor itself and
    the app runs once."""
    s = create_scheduler("host")
    warm = s.schedule(s.submit_dryrun(AppDef("w", roles=[Role("r", entrypoint="true")]), FAST))
    finish(s, warm)
    held: list[int] = []  # the open lock file, locked, once the record exists
    create = s.store.create

    def create_and_lock(record: object) -> None:
        create(record)  # type: ignore[arg-type]
        fd = os.open(s.store.app_dir(record.app_id) / "lock", os.O_RDWR)  # type: ignore[attr-defined]
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)

    monkeypatch.setattr(s.store, "create", create_and_lock)
    for _attempt in range(2):
        marker = f"tether-claim-{uuid.uuid4().hex}"
        info = s.submit_dryrun(counting_app(marker, 2), {**FAST, "cwd": "/tmp"})
        app_id = info.request.app_id
        app_dir = s.store.app_dir(app_id)
        errors: list[BaseException] = []

        def launch(info: object = info, errors: list[BaseException] = errors) -> None:
            try:
                s.schedule(info)  # type: ignore[arg-type]
            except BaseException as e:  # reported below
                errors.append(e)

        th = threading.Thread(target=launch)
        th.start()
        try:
            killed = None
            deadline = time.monotonic() + 60
            while killed is None or not waiting_for_lock(app_dir / "lock", killed):
                assert time.monotonic() < deadline, "the forked supervisor waits for the lock"
                assert th.is_alive(), errors
                killed = forked_supervisor(app_dir) if held else None
                time.sleep(0.005)
            rec = s.store.load(app_id)
            assert rec is not None and rec.supervisor_pid is None, "not claimed yet"
            os.kill(killed, signal.SIGKILL)
            while pid_alive(killed):
                time.sleep(0.01)
        finally:
            if held:
                os.close(held.pop())
        th.join(60)
        assert not th.is_alive() and not errors, errors
        assert finish(s, app_id) == AppState.SUCCEEDED
        assert runs_of(marker) == ["ran", "ran"], "each replica ran exactly once"
        rec = s.store.load(app_id)
        assert rec is not None and rec.supervisor_pid not in (None, killed)


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_an_unknown_switch_value_is_reported_and_keeps_the_host(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(host.ENABLE_ENV, value)
    assert host.enabled()
    assert f"{host.ENABLE_ENV}={value!r} is not one of" in caplog.text
    assert "0/false/off/no (off)" in caplog.text


@pytest.mark.parametrize("value", ["soon", "-5", "0", "nan", "inf"])
def test_a_bad_idle_timeout_is_reported_and_means_the_default(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(host.IDLE_ENV, value)
    assert host.idle_seconds() == host.DEFAULT_IDLE_S
    assert f"{host.IDLE_ENV}={value!r} is not a positive number" in caplog.text


def test_the_switch_turns_the_host_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "false", "OFF", " no "):
        monkeypatch.setenv(host.ENABLE_ENV, value)
        assert not host.enabled()
    monkeypatch.setenv(host.IDLE_ENV, "2.5")
    assert host.idle_seconds() == 2.5


def test_a_launch_is_taken_by_the_waiting_spare_and_the_spare_goes_with_the_host() -> None:
    """The host keeps a spare waiting: a launch makes that very process its supervisor (no
    fork while the launcher waits), and a new spare waits for the next one. A killed spare
    costs no launch (the host serves it itself, then forks a spare again), and a spare does
    not outlive its host."""
    s = create_scheduler("host")
    finish(s, s.schedule(s.submit_dryrun(AppDef("w", roles=[Role("r", entrypoint="true")]),
                                         FAST)))
    (spare,) = eventually("a spare waits", spare_pids)
    app_id = s.schedule(s.submit_dryrun(
        AppDef("one", roles=[Role("r", entrypoint="sleep", args=["30"])]), FAST))
    rec = s.store.load(app_id)
    assert rec is not None and rec.supervisor_pid == spare, "the spare became the supervisor"
    (nxt,) = eventually("a new spare waits", lambda: [p for p in spare_pids() if p != spare])
    s.cancel(app_id)
    assert finish(s, app_id) == AppState.CANCELLED

    os.kill(nxt, signal.SIGKILL)
    eventually("the spare is gone", lambda: not pid_alive(nxt))
    app_id = s.schedule(s.submit_dryrun(
        AppDef("two", roles=[Role("r", entrypoint="true")]), FAST))
    assert finish(s, app_id) == AppState.SUCCEEDED
    eventually("a spare waits again", spare_pids)

    (h,) = host_pids()
    left = spare_pids()
    os.kill(h, signal.SIGKILL)
    eventually("the spare exited with its host", lambda: not any(pid_alive(p) for p in left))

