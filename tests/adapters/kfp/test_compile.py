"""The compile CLI, on the example pipeline (prepare -> DDP train -> evaluate)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tether.adapters.kfp.compile import CompileTargetError, load_pipeline

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = "examples/pipelines/kfp_train.py:train_pipeline"


def compile_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.adapters.kfp.compile", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_example_pipeline_compiles_and_loads_back(tmp_path: Path) -> None:
    from kfp import components

    out = tmp_path / "build" / "kfp_train.yaml"
    res = compile_cli(EXAMPLE, str(out), "-p", "j=2x2")
    assert res.returncode == 0, res.stderr
    assert f"compiled {EXAMPLE} to {out}" in res.stdout

    loaded = components.load_component_from_file(str(out))
    assert loaded.name == "tether-train"
    spec = yaml.safe_load(out.read_text().split("\n---\n")[0])
    assert spec["root"]["inputDefinitions"]["parameters"]["j"]["defaultValue"] == "2x2"
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"prepare", "train", "evaluate"}
    assert tasks["train"]["dependentTasks"] == ["prepare"]
    assert sorted(tasks["evaluate"]["dependentTasks"]) == ["prepare", "train"]
    # prepare's published outputs flow into train's and evaluate's arguments
    train_args = tasks["train"]["inputs"]["parameters"]["script_args"]["runtimeValue"][
        "constant"]
    assert "{{$.inputs.parameters['pipelinechannel--prepare-features']}}" in train_args
    eval_args = tasks["evaluate"]["inputs"]["parameters"]["args"]["runtimeValue"]["constant"]
    assert "{{$.inputs.parameters['pipelinechannel--prepare-data_dir']}}" in eval_args
    outputs = spec["components"]["comp-prepare"]["outputDefinitions"]["parameters"]
    assert {"app_handle", "outputs", "data_dir"} <= set(outputs)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("examples/pipelines/kfp_train.py", "must be MODULE:PIPELINE"),
        ("examples/pipelines/kfp_train.py:train_pipelin",
         "has no 'train_pipelin'; did you mean train_pipeline?"),
        ("examples/pipelines/kfp_train.py:make_pipeline", "not a pipeline: decorate it"),
        ("examples/pipelines/nope.py:p", "no such file"),
        ("no_such_module_xyz:p", "cannot import module 'no_such_module_xyz'"),
    ],
)
def test_bad_targets_are_explained(target: str, expected: str, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(CompileTargetError, match=expected.replace("?", r"\?")):
        load_pipeline(target)


def test_cli_bad_target_exit_code(tmp_path: Path) -> None:
    res = compile_cli("examples/pipelines/kfp_train.py:nope", str(tmp_path / "x.yaml"))
    assert res.returncode == 2
    assert "error: examples/pipelines/kfp_train.py has no 'nope'" in res.stderr
    assert not (tmp_path / "x.yaml").exists()
