"""Runs a program between two signal files: ``process_monitor [opts] -- program args...``.

Waits for ``--start_on_file`` (if given) before starting the program, and stops it when
``--exit_on_file`` appears or ``--timeout`` seconds have passed. Files are fsspec URLs. The
exit code is the program's when it ends by itself, 0 when it was stopped on purpose.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType


def _exists(url: str) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return bool(fs.exists(path))


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before stopping")
    parser.add_argument("--start_on_file", default="", help="wait for this file before starting")
    parser.add_argument("--exit_on_file", default="", help="stop when this file exists")
    parser.add_argument("--poll_interval", type=float, default=1.0, help="seconds between checks")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- program and arguments")
    args = parser.parse_args(argv)
    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if not program:
        parser.error("no program given (write: -- program args...)")

    deadline = time.monotonic() + args.timeout
    if args.start_on_file:
        print(f"process_monitor: waiting for {args.start_on_file}", flush=True)
        while not _exists(args.start_on_file):
            if time.monotonic() >= deadline:
                print("process_monitor: timed out before the start file appeared", flush=True)
                return 0
            time.sleep(args.poll_interval)

    try:
        proc = subprocess.Popen(program)
    except OSError as e:
        print(f"process_monitor: cannot start {program[0]!r}: {e}", file=sys.stderr)
        return 127

    def forward(signum: int, _frame: FrameType | None) -> None:
        _stop(proc)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    while True:
        code = proc.poll()
        if code is not None:
            return code
        if args.exit_on_file and _exists(args.exit_on_file):
            print(f"process_monitor: {args.exit_on_file} exists, stopping", flush=True)
            _stop(proc)
            return 0
        if time.monotonic() >= deadline:
            print(f"process_monitor: timeout of {args.timeout}s reached, stopping", flush=True)
            _stop(proc)
            return 0
        time.sleep(args.poll_interval)


if __name__ == "__main__":
    sys.exit(main())
