"""The example pipeline (prepare -> DDP train -> evaluate) runs for real with kfp.local."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.importorskip("kfp")
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "pipelines" / "kfp_train.py"
TRAIN_APP = REPO / "examples" / "apps" / "train_ddp.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,  # kfp.local runs the pipeline's steps
    pytest.mark.filterwarnings("ignore:You may be attemping to run a task:RuntimeWarning"),
]


@pytest.mark.skipif("--model-dir" not in TRAIN_APP.read_text(),
                    reason="examples/apps/train_ddp.py does not write a model (--model-dir) yet")
def test_example_pipeline_runs_locally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capfd: pytest.CaptureFixture[str]) -> None:
    from kfp.local import config

    monkeypatch.chdir(REPO)  # the apps are referred to relative to the repository
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # run_locally prepends to it
    spec = importlib.util.spec_from_file_location("kfp_train_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        mse = module.run_locally(str(tmp_path / "work"), j="1x2")
    finally:
        config.LocalExecutionConfig.instance = None
    assert 0.0 <= mse < 0.05
    log = capfd.readouterr().out
    assert "prepare" in log and "train_ddp/0" in log
    assert (tmp_path / "work" / "model" / "model.pt").exists()
