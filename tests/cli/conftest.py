"""Fixtures of the CLI tests: an isolated project directory and ways to call ``tether``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tether.cli.main import main


@dataclass
class Result:
    """What one ``tether`` invocation did."""

    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project directory as cwd and $HOME; `python` in jobs is this interpreter."""
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}"
                               f"{os.environ['PATH']}")
    for var in ("TETHERCONFIG", "TETHER_DEBUG", "LOGLEVEL", "TETHER_TRACKERS"):
        monkeypatch.delenv(var, raising=False)
    return proj


@pytest.fixture
def tether(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Runs ``tether ARGS`` in this process (real schedulers, real jobs)."""

    def call(*argv: str) -> Result:
        capsys.readouterr()
        try:
            main(list(argv))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return call


@pytest.fixture
def tether_proc() -> Callable[..., Result]:
    """Runs ``tether ARGS`` as a separate process (the console script's code path)."""

    def call(*argv: str, timeout: float = 120, env: dict[str, str] | None = None) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "tether.cli.main", *argv],
            capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, **(env or {})},
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return call
