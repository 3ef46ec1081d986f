"""Fixtures of the KFP adapter tests: a private tether state, and kfp.local set up and reset."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def tether_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state directory (jobs, outputs) that launcher steps in subprocesses see too."""
    state = tmp_path / "state"
    monkeypatch.setenv("TETHER_STATE_DIR", str(state))
    monkeypatch.delenv("TETHER_OUTPUTS_ROOT", raising=False)
    monkeypatch.delenv("TETHER_TRACKERS", raising=False)
    # launcher steps import the test components in a subprocess
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    return state


@pytest.fixture
def kfp_subprocess(tmp_path: Path) -> Iterator[Path]:
    """``kfp.local`` with the SubprocessRunner in the current environment (tether installed).

    Returns:
        The pipeline root.
    """
    from kfp import local
    from kfp.local import config

    root = tmp_path / "kfp-root"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    try:
        yield root
    finally:
        config.LocalExecutionConfig.instance = None
