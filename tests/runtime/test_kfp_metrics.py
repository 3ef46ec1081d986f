"""tether.runtime.report in a KFP native step with metrics: the step's Metrics artifact.

The variables are what KFP fills into the step's ``env`` command (``{{$}}`` and the
artifact's path); the compiled command run for real: tests/adapters/kfp/test_native_metrics.py;
under ``kfp.local`` in a container: tests/e2e/test_kfp_docker.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tether.runtime import kfp_metrics, report
from tether.runtime import progress as progress_mod
from tether.tracker.progress import read_progress


def executor_input(tmp_path: Path) -> dict[str, Any]:
    """An executor input as KFP hands it to a step with the ``tether_metrics`` artifact."""
    return {
        "inputs": {"parameterValues": {"msg": "hi"}},
        "outputs": {
            "artifacts": {"tether_metrics": {"artifacts": [{
                "name": "tether_metrics",
                "type": {"schemaTitle": "system.Metrics", "schemaVersion": "0.0.1"},
                "uri": str(tmp_path / "root" / "task" / "tether_metrics"),
                "metadata": {},
            }]}},
            "outputFile": str(tmp_path / "root" / "task" / "executor_output.json"),
        },
    }


@pytest.fixture
def step_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fresh reporter in a KFP step with metrics: (artifact file, executor output file)."""
    doc = executor_input(tmp_path)
    path = Path(doc["outputs"]["artifacts"]["tether_metrics"]["artifacts"][0]["uri"])
    monkeypatch.setenv(kfp_metrics.ENV_EXECUTOR_INPUT, json.dumps(doc))
    monkeypatch.setenv(kfp_metrics.ENV_METRICS_PATH, str(path))
    monkeypatch.delenv("TETHER_OUTPUTS_URL", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(progress_mod, "_reporter", progress_mod._Reporter())
    return path, Path(doc["outputs"]["outputFile"])


def metadata(output_file: Path) -> dict[str, Any]:
    doc = json.loads(output_file.read_text())
    entries = doc["artifacts"]["tether_metrics"]["artifacts"]
    assert len(entries) == 1 and entries[0]["name"] == "tether_metrics"
    return dict(entries[0]["metadata"])


def test_each_written_report_replaces_the_artifact(step_env: tuple[Path, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path, output_file = step_env
    monkeypatch.setenv("TETHER_PROGRESS_INTERVAL", "3600")
    assert report(step=1, total=4, loss=0.5)  # written at once, while the job runs
    assert metadata(output_file) == {"loss": 0.5, "step": 1.0, "total": 4.0}
    assert json.loads(path.read_text())["metrics"] == {"loss": 0.5}

    assert not report(step=2, total=4, loss=0.25)  # rate-limited: kept for later
    assert metadata(output_file)["step"] == 1.0
    progress_mod._reporter.flush()  # what the process's exit does
    assert metadata(output_file)["loss"] == 0.25

    assert report(step=4, total=4, acc=0.9)  # reaching total: written; loss is gone
    got = metadata(output_file)
    assert got == {"acc": 0.9, "step": 4.0, "total": 4.0, "eta_s": got["eta_s"]}
    saved = json.loads(path.read_text())
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"acc": 0.9})
    # the artifact's URI and type stay what KFP gave, and nothing is left half-written
    entry = json.loads(output_file.read_text())["artifacts"]["tether_metrics"]["artifacts"][0]
    assert entry["uri"] == str(path) and entry["type"]["schemaTitle"] == "system.Metrics"
    assert sorted(p.name for p in path.parent.iterdir()) == ["executor_output.json",
                                                             "tether_metrics"]


def test_what_else_the_executor_output_holds_is_kept(step_env: tuple[Path, Path]) -> None:
    _, output_file = step_env
    output_file.parent.mkdir(parents=True)
    output_file.write_text(json.dumps({"parameterValues": {"n": 3}, "artifacts": {
        "model": {"artifacts": [{"name": "model", "metadata": {"f1": 0.8}}]}}}))
    assert report(step=1, total=2)
    doc = json.loads(output_file.read_text())
    assert doc["parameterValues"] == {"n": 3}
    assert doc["artifacts"]["model"]["artifacts"][0]["metadata"] == {"f1": 0.8}
    assert metadata(output_file) == {"step": 1.0, "total": 2.0}


def test_a_tether_job_in_such_a_step_writes_both(step_env: tuple[Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, output_file = step_env
    url = str(tmp_path / "outputs" / "app-1")
    monkeypatch.setenv("TETHER_OUTPUTS_URL", url)
    assert report(step=3, total=10, loss=0.33)
    got = read_progress(url)
    assert got is not None and got.step == 3
    assert metadata(output_file) == {"loss": 0.33, "step": 3.0, "total": 10.0}


def test_only_rank_0_writes(step_env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path, output_file = step_env
    monkeypatch.setenv("RANK", "1")
    assert not report(step=1, total=2)
    assert not path.exists() and not output_file.exists()


def test_a_bad_executor_input_is_logged_and_nothing_written(
        step_env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path, output_file = step_env
    monkeypatch.setenv(kfp_metrics.ENV_EXECUTOR_INPUT, "{{$}}")  # left unfilled
    with caplog.at_level(logging.WARNING, logger="tether.runtime.kfp_metrics"):
        assert not report(step=1, total=2)
    assert "TETHER_KFP_EXECUTOR_INPUT is not KFP's executor input" in caplog.text
    monkeypatch.setenv(kfp_metrics.ENV_EXECUTOR_INPUT, json.dumps({"outputs": {}}))
    with caplog.at_level(logging.WARNING, logger="tether.runtime.kfp_metrics"):
        assert not report(step=1, total=2)
    assert "names no output artifact tether_metrics" in caplog.text
    assert not path.exists() and not output_file.exists()


def test_a_file_that_cannot_be_written_never_fails_the_job(
        step_env: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    _, output_file = step_env
    output_file.mkdir(parents=True)  # a folder where the file should be
    with caplog.at_level(logging.WARNING, logger="tether.runtime.kfp_metrics"):
        assert report(step=1, total=3)
        assert report(step=3, total=3)
    assert caplog.text.count("cannot write the step's tether_metrics artifact") == 1
