"""``tether log --streams stdout`` reads a 200 MB log without a newline in bounded memory.

A real ``local_cwd`` job writes 200 MiB of ``x`` with no newline to its stdout. The real CLI
(``python -m tether.cli.main log``) then prints it, in a process whose address space is
capped (``RLIMIT_AS``) at its size after start-up plus a fixed headroom: the whole path (the
scheduler's log reader, the fan-in queue, secret masking, the prefix, the write) must hold a
bounded number of pieces (of up to 8 MiB) at a time, however long the line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result

SIZE_MB = 200
HEADROOM_MB = 128
"""Cap above the CLI's start-up size: the 16 MiB fan-in queue, one 8 MiB piece being read,
masked, prefixed and encoded, thread stacks. (Before the fix: 847 MB peak, or no end at all
once secret masking met a megabyte line.)"""

WRITER = (
    "import sys\n"
    "block = b'x' * (1 << 20)\n"
    f"for _ in range({SIZE_MB}):\n"
    "    sys.stdout.buffer.write(block)\n"
)

CAPPED_CLI = textwrap.dedent(
    """
    import resource, sys, threading
    import tether.cli.main, tether.runner, tether.runner.logs
    import tether.schedulers.local.scheduler  # imported before the cap: code is not data

    def vm_kb(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])

    headroom_mb = int(sys.argv[1])
    cap = vm_kb("VmSize") * 1024 + headroom_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        tether.cli.main.main(sys.argv[2:])
    finally:
        print(f"peak_over_start_mb={(vm_kb('VmPeak') * 1024 - cap) / 2**20 + headroom_mb:.0f}",
              file=sys.stderr)
    """
)


@pytest.mark.slow
def test_log_of_a_200mb_line_in_bounded_memory(
    tether: Callable[..., Result], tmp_path: Path
) -> None:
    run = tether("run", "-s", "local_cwd", "-cfg", "grace_period=1", "utils.python",
                 "-c", WRITER)
    assert run.code == 0, run.err
    handle = run.out.strip().splitlines()[0]
    out = tmp_path / "out.txt"
    with open(out, "wb") as sink:
        proc = subprocess.run(
            [sys.executable, "-c", CAPPED_CLI, str(HEADROOM_MB),
             "log", "--streams", "stdout", handle],
            stdout=sink, stderr=subprocess.PIPE, text=True, timeout=600, check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    xs = pieces = 0
    with open(out, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            xs += chunk.count(b"x")
            pieces += chunk.count(b"\n")
    assert xs == SIZE_MB * 2**20  # every byte of the line came out
    assert out.stat().st_size == xs + pieces * len("python/0 \n")  # prefixed pieces
    peak = proc.stderr.strip().splitlines()[-1]
    print(f"\n[log-memory] tether log --streams stdout: {SIZE_MB} MiB, no newline, "
          f"{pieces} pieces, cap=+{HEADROOM_MB} MiB, {peak}")
