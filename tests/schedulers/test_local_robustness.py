"""``local_cwd`` under hostile conditions: corrupt state, huge log lines, a full disk."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.schedulers.local.state import CorruptRecordError
from tether.specs import AppDef, AppState, Role

FAST = {"grace_period": 0.5}


def run_app(s: LocalScheduler, *roles: Role) -> str:
    app_id = s.schedule(s.submit_dryrun(AppDef("robust", roles=list(roles)), FAST))
    for _ in range(300):
        d = s.describe(app_id)
        assert d is not None
        if d.state.is_terminal():
            return app_id
        s.wait_for_change(app_id, 1.0)
    raise AssertionError(f"{app_id} did not finish")


CORRUPTIONS = {
    "garbage": b"\x00\xffnot json",
    "truncated": b'{"app_id": "x", "name": ',
    "a list": b"[1, 2, 3]",
    "foreign fields": json.dumps({"hello": "world"}).encode(),
    "bad state": None,  # filled in from a real record below
    "future version": None,
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_record_is_skipped_by_list_with_a_warning_naming_the_file(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = create_scheduler("robust")
    good = run_app(s, Role("ok", entrypoint="true"))
    bad = run_app(s, Role("ok", entrypoint="true"))
    path = s.store.state_path(bad)
    data = CORRUPTIONS[kind]
    if data is None:
        doc = json.loads(path.read_bytes())
        if kind == "bad state":
            doc["state"] = "EXPLODED"
        else:
            doc["version"] = 99
        data = json.dumps(doc).encode()
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING):
        listed = [a.app_id for a in s.list()]
    assert good in listed and bad not in listed
    assert str(path) in caplog.text
    with pytest.raises(CorruptRecordError, match=str(path)) as ei:
        s.describe(bad)
    assert isinstance(ei.value, ValueError)
    d = s.describe(good)
    assert d is not None and d.state == AppState.SUCCEEDED


READER = textwrap.dedent(
    """
    import resource, sys, time
    from tether.schedulers.local.logs import read_log_lines

    def vm_kb():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1])

    path, mode, headroom_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cap = vm_kb() * 1024 + headroom_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    kw = {}
    if mode == "tail":
        kw["finished"] = lambda: True
    elif mode == "since":
        kw["since"] = 0.0
    total = longest = n = 0
    for line in read_log_lines(path, **kw):
        total += len(line)
        longest = max(longest, len(line))
        n += 1
    print(total, longest, n)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "tail", "since"])
def test_a_200mb_line_is_read_in_bounded_memory(tmp_path: Path, mode: str) -> None:
    """200 MB without a newline, read under an address-space cap of 64 MB above start-up."""
    log = tmp_path / "stdout.log"
    size = 200 * 1024 * 1024
    block = b"x" * (1024 * 1024)
    with open(log, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)
    if mode == "since":  # a time index as the supervisor writes it: one entry at offset 0
        import struct

        (tmp_path / "stdout.log.idx").write_bytes(struct.Struct("<Qd").pack(0, 1.0))
    proc = subprocess.run(
        [sys.executable, "-c", READER, str(log), mode, "64"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    total, longest, n = map(int, proc.stdout.split())
    print(f"\n[log-memory] mode={mode} bytes={size} lines={n} longest={longest} cap=+64MiB")
    assert total == size + n  # every byte, plus the newline ending each piece
    assert longest <= 8 * 1024 * 1024 + 1


LAUNCH_LIMITED = textwrap.dedent(
    """
    import resource, sys
    from tether.schedulers.local.scheduler import create_scheduler
    from tether.specs import AppDef, Role
    limit = int(sys.argv[1])
    # every file this process and its children write is capped: a "full disk" for logs
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    chatty = (
        "import sys, time\\n"
        "for i in range(40):\\n"
        "    sys.stdout.write('x' * 1023 + '\\\\n'); sys.stdout.flush()\\n"
        "    if i % 10 == 0: time.sleep(0.05)\\n"
        "print('bye', file=sys.stderr)\\n"
    )
    s = create_scheduler("robust")
    app = AppDef("fulldisk", roles=[
        Role("chatty", entrypoint=sys.executable, args=["-c", chatty]),
        Role("quiet", entrypoint="sh", args=["-c", "sleep 1.5; exit 0"]),
    ])
    print(s.schedule(s.submit_dryrun(app, {"grace_period": 0.5})), flush=True)
    """
)


def test_full_disk_drops_log_lines_but_jobs_run_and_the_outcome_is_recorded(
    tmp_path: Path,
) -> None:
    """Logs hit a file size limit (RLIMIT_FSIZE; EFBIG as a full disk gives ENOSPC)."""
    limit = 16 * 1024
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCH_LIMITED, str(limit)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    app_id = proc.stdout.strip().splitlines()[-1]
    s = create_scheduler("robust")
    for _ in range(120):
        d = s.describe(app_id)
        assert d is not None
        if d.state.is_terminal():
            break
        s.wait_for_change(app_id, 1.0)
    assert d is not None and d.state == AppState.SUCCEEDED, d  # not killed for their logs
    chatty = d.roles_statuses[0].replicas[0]
    assert chatty.state == AppState.SUCCEEDED
    assert "bytes of log output were dropped" in chatty.msg, chatty.msg
    rec = s.store.load(app_id)
    assert rec is not None
    rep = rec.replica("chatty", 0)
    assert rep is not None and rep.dropped_log_bytes > 0
    assert os.path.getsize(rep.stdout) <= limit
    sup_log = Path(rec.supervisor_log).read_text()
    assert "dropping output" in sup_log
    print(f"\n[full-disk] limit={limit} dropped={rep.dropped_log_bytes} state={d.state.name}")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root and mount permission; skipped otherwise)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); "
                    "test_full_disk_drops_log_lines... covers logs with RLIMIT_FSIZE")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def wait_path(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)
    return path.read_text()


def test_supervisor_survives_a_full_disk_under_its_state_dir(
    small_fs: Path, tmp_path: Path
) -> None:
    """State and logs on a 1 MiB tmpfs: the logs fill it, a replica ends while it is full."""
    flags = tmp_path / "flags"
    flags.mkdir()
    s = create_scheduler("robust", state_dir=small_fs)
    chatty = (
        "import os, sys, time\n"
        "for i in range(3000): sys.stdout.write('y' * 1023 + '\\n')\n"
        "sys.stdout.flush(); open(sys.argv[1] + '/full', 'w').close()\n"
        "while not os.path.exists(sys.argv[1] + '/gate'): time.sleep(0.02)\n"
        "print('after the disk was freed', flush=True)\n"
    )
    late = (
        "import os, sys, time\n"
        "while not os.path.exists(sys.argv[1] + '/full'): time.sleep(0.02)\n"
        "open(sys.argv[1] + '/late', 'w').write(str(os.getpid()))\n"
    )
    app = AppDef("fulldisk", roles=[
        Role("chatty", entrypoint=sys.executable, args=["-c", chatty, str(flags)]),
        Role("late", entrypoint=sys.executable, args=["-c", late, str(flags)]),
    ])
    app_id = s.schedule(s.submit_dryrun(app, FAST))
    try:
        wait_path(flags / "full")
        late_pid = int(wait_path(flags / "late") or "0")
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{late_pid}") and time.monotonic() < deadline:
            time.sleep(0.02)  # reaped: the supervisor is recording its end on a full disk
        time.sleep(0.5)  # let it try (and, before the fix, crash) while the disk is full
        rec_path = s.store.state_path(app_id)
        for log in rec_path.parent.rglob("*.log"):
            if log.name in ("stdout.log", "combined.log"):
                os.truncate(log, 0)  # the user frees space
        (flags / "gate").touch()
        state = AppState.UNKNOWN
        for _ in range(120):
            d = s.describe(app_id)
            assert d is not None
            state = d.state
            if state.is_terminal():
                break
            s.wait_for_change(app_id, 1.0)
        assert state == AppState.SUCCEEDED, s.describe(app_id)
        rec = s.store.load(app_id)
        assert rec is not None
        rep = rec.replica("chatty", 0)
        assert rep is not None and rep.dropped_log_bytes > 0
        out = Path(rep.stdout).read_text()
        assert "bytes of output were dropped" in out and "after the disk was freed" in out
        print(f"\n[full-disk tmpfs] dropped={rep.dropped_log_bytes} state={state.name}")
    finally:
        s.cancel(app_id)


def test_a_supervisor_whose_app_directory_was_deleted_still_ends() -> None:
    """The state directory removed under a running app (``rm -rf``, a temp dir cleaned up):
    the app's end cannot be recorded anywhere, and the supervisor must not wait for ever."""
    import shutil
    import signal as sig

    from tether.schedulers.local.proctable import pid_alive

    s = create_scheduler("robust")
    app_id = s.schedule(s.submit_dryrun(
        AppDef("gone", roles=[Role("r", entrypoint="sleep", args=["60"])]), FAST))
    rec = wait_started(s.store, app_id)  # running: no file is being made as it is removed
    assert rec.supervisor_pid is not None
    sup, start = rec.supervisor_pid, rec.supervisor_start_time
    shutil.rmtree(s.store.app_dir(app_id))
    os.kill(sup, sig.SIGTERM)  # what cancel sends (cancel itself needs the record)
    deadline = time.monotonic() + 30
    while pid_alive(sup, start) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(sup, start), "the supervisor exited"


# ---- stream logs created by their first byte -------------------------------------------------
def test_a_stream_log_appears_with_its_first_byte_and_a_silent_stream_reads_empty(
    tmp_path: Path,
) -> None:
    from tether.schedulers.api import Stream

    s = create_scheduler("robust")
    role = Role("r", image="", entrypoint=sys.executable, args=["-c", "print('only out')"])
    app_id = s.schedule(s.submit_dryrun(AppDef("quiet", roles=[role]),
                                        {**FAST, "log_dir": str(tmp_path)}))
    for _ in range(300):
        if s.describe(app_id).state.is_terminal():  # type: ignore[union-attr]
            break
        s.wait_for_change(app_id, 1.0)
    assert s.describe(app_id).state == AppState.SUCCEEDED  # type: ignore[union-attr]
    rdir = tmp_path / app_id / "r" / "0"
    assert (rdir / "stdout.log").read_text() == "only out\n"
    assert (rdir / "combined.log").read_text() == "only out\n"
    assert not (rdir / "stderr.log").exists()  # never written to: never created
    assert list(s.log_iter(app_id, "r", 0, streams=Stream.STDERR)) == []
    assert list(s.log_iter(app_id, "r", 0, streams=Stream.STDOUT)) == ["only out\n"]


def test_a_log_that_could_not_be_opened_is_opened_again_by_a_later_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.schedulers.local.logfiles import LogFile

    path = tmp_path / "later" / "stdout.log"
    log = LogFile(str(path), lazy=True)
    with caplog.at_level(logging.WARNING):
        log.write(b"lost\n", time.time())  # its directory is missing: dropped, reported once
        log.write(b"lost too\n", time.time())
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "cannot write" in r.message)) == 1
    path.parent.mkdir()
    log.write(b"kept\n", time.time())
    log.close()
    text = path.read_text()
    assert "14 bytes of output were dropped" in text and text.endswith("kept\n")
    assert path.stat().st_mode & 0o777 == 0o600
