"""Progress reports recorded by the trackers: a real ``local_cwd`` job calls
``tether.runtime.report``; the fsspec tracker (a local store) and MLflow (its file store)
record each report while the job runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tether.schedulers.local")
pytest.importorskip("mlflow")

from tests.adapters.progress_app import training
from tests.schedulers.local_started import wait_running
from tether.runner import get_runner
from tether.specs import AppState
from tether.tracker.backend.fsspec import create as create_fsspec
from tether.tracker.backend.mlflow import create as create_mlflow


def _configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A .tetherconfig naming both trackers, as a user writes it; returns their configs."""
    store, mlruns = str(tmp_path / "tracker"), f"file://{tmp_path / 'mlruns'};experiment=e2e"
    cfg = tmp_path / "project.tetherconfig"
    cfg.write_text("\n".join([
        "[tether:tracker]", "fsspec =", "mlflow =", "",
        "[tracker:fsspec]", f"config = {store}", "",
        "[tracker:mlflow]", f"config = {mlruns}", "",
    ]))
    monkeypatch.setenv("TETHERCONFIG", str(cfg))
    return store, mlruns


def _history(mlruns: str, handle: str, metric: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    tracker = create_mlflow(mlruns)
    mid = tracker._mlflow_id(handle, create=False)
    if mid is None:
        return []
    client = MlflowClient(mlruns.split(";", 1)[0])
    return sorted((m.step, m.value) for m in client.get_metric_history(mid, metric))


def _wait_for(what: str, check: Any, patience: float = 240.0) -> Any:
    """Polls ``check`` until it returns a value (a hang guard, not a timing assert)."""
    end = time.monotonic() + patience
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"never saw {what}")


@pytest.mark.slow
def test_reports_are_recorded_by_fsspec_and_mlflow_while_the_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, mlruns = _configure(tmp_path, monkeypatch)
    gate = tmp_path / "gate"
    fsspec_tracker = create_fsspec(store)
    with get_runner() as runner:
        handle = runner.run(training(str(gate)), "local_cwd")
        try:
            # the job reported 1/4 and waits for its gate: the trackers have the report now
            live = _wait_for("the first report in the fsspec tracker",
                             lambda: fsspec_tracker.progress(handle))
            assert (live["step"], live["total"], live["metrics"]) == (1, 4, {"loss": 0.5})
            assert _history(mlruns, handle, "loss") == [(1, 0.5)]
            wait_running(runner, handle)  # live: the job runs, held at its gate
        finally:
            gate.touch()
        status = runner.wait(handle, wait_interval=0.1, timeout=240)
        assert status is not None and status.state == AppState.SUCCEEDED, (
            status, "".join(runner.log_lines(handle, "trainer", 0)))

    last = fsspec_tracker.progress(handle)
    assert last is not None and (last["step"], last["metrics"]) == (4, {"loss": 0.125})
    # MLflow keeps every recorded report's metrics at its step (its charts), and the last one
    assert _history(mlruns, handle, "loss") == [(1, 0.5), (4, 0.125)]
    last_mlflow = create_mlflow(mlruns).progress(handle)
    assert last_mlflow is not None and last_mlflow["step"] == 4
    # a report is neither metadata nor an output
    assert fsspec_tracker.metadata(handle) == {}


def test_a_run_without_reports_has_none(tmp_path: Path) -> None:
    assert create_fsspec(str(tmp_path / "tracker")).progress("local_cwd://tether/x") is None
