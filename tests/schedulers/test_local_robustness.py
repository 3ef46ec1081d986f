"""``local_cwd`` under hostile conditions: corrupt state, huge log lines, a full disk."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
