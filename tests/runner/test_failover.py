"""Failover lists at the Runner: bad input is refused before anything is
submitted, and each candidate gets the options it declares.

The failover itself (a real quota refusal moving the job to ``local_cwd``) is tested on the
e2e kube-apiserver: ``tests/e2e/test_kubernetes_failure_causes_e2e.py``; the CLI's lists in
``tests/cli/test_recovery_cli.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import SpecError
from tether.runner import Runner
from tether.runner.logical import UnknownRunOptionError
from tether.schedulers import UnknownSchedulerError
from tether.specs import AppDef, AppState, Role


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner() as r:
        yield r


def _app() -> AppDef:
    return AppDef("fo", roles=[Role("w", image=".", entrypoint=sys.executable,
                                    args=["-c", "print('ran')"])])  # fmt: skip


def _nothing_submitted(tmp_path: Path) -> bool:
    return not (tmp_path / "state" / "local_cwd").exists() or not any(
        (tmp_path / "state" / "local_cwd").rglob("state.json"))


def test_an_option_no_candidate_declares_is_refused(runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(UnknownRunOptionError, match=r"run option 'no_such' is not an option "
                       r"of any of the schedulers local_cwd, kubernetes"):  # fmt: skip
        runner.run(_app(), ["local_cwd", "kubernetes"], {"no_such": "1"})
    assert _nothing_submitted(tmp_path)


def test_an_unknown_scheduler_in_the_list_is_refused(runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(UnknownSchedulerError, match=r"unknown scheduler 'kubernets'\. Did you "
                       r"mean kubernetes"):  # fmt: skip
        runner.run(_app(), ["local_cwd", "kubernets"])
    with pytest.raises(SpecError, match="not a list of scheduler names"):
        runner.run(_app(), [])
    assert _nothing_submitted(tmp_path)


def test_each_candidate_gets_the_options_it_declares(runner: Runner) -> None:
    """``namespace`` is kubernetes's only: local_cwd, the first candidate with room, runs
    the job without it (one logical handle)."""
    handle = runner.run(_app(), ["local_cwd", "kubernetes"], {"namespace": "ml"})
    assert handle.startswith("chain://")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED
    assert [a["scheduler"] for a in runner.attempts(handle)] == ["local_cwd"]
