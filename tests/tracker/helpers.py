"""Shared helpers for tracker tests: run Python code in real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping


def start_python(code: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Starts ``python -c code`` with the current environment plus ``env``."""
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_all(procs: list[subprocess.Popen[str]], timeout: float = 120) -> None:
    """Waits for every process; fails with its output when one failed."""
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"child failed (rc={p.returncode}):\n{out}"
