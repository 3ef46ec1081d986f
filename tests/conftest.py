"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def tether_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Points ``TETHER_STATE_DIR`` at a fresh directory, so no test touches ~/.local/state.

    Subprocesses started by a test inherit it through the environment.

    Returns:
        The state directory.
    """
    state = tmp_path_factory.mktemp("tether-state")
    monkeypatch.setenv("TETHER_STATE_DIR", str(state))
    return state


# Session fixtures of real infrastructure (one Kubernetes control plane per session, shared
# by tests/e2e and the contract suite) and the backend contract suite's harness parameter.
pytest_plugins = ["tests.e2e.infra.fixtures", "tests.schedulers.contract.plugin"]
