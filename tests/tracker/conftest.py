"""Isolation for tracker tests: a private state dir, no inherited tracking env, empty config."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.tracker.app_run import clear_cache

_INHERITED = (
    "TETHER_JOB_ID",
    "TETHER_PARENT_RUN_ID",
    "TETHER_TRACKERS",
    "TETHER_OUTPUTS_URL",
    "TETHER_OUTPUTS_ROOT",
    "TETHER_APP_NAME",
    "TETHER_REPLICA_ID",
    "TETHER_ROLE_NAME",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_ALLOW_FILE_STORE",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for var in list(os.environ):
        if var in _INHERITED or (var.startswith("TETHER_TRACKER_") and var.endswith("_CONFIG")):
            monkeypatch.delenv(var)
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    empty = tmp_path / "empty.tetherconfig"
    empty.write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(empty))
    monkeypatch.chdir(tmp_path)
    clear_cache()
    yield
    clear_cache()
    # backends may set variables (MLFLOW_ALLOW_FILE_STORE): restore the environment exactly
    os.environ.clear()
    os.environ.update(saved)
