"""A native step's ``tether_metrics`` artifact (``KubernetesOptions(metrics=True)``).

The compiled command is run here for real, with the values KFP fills in, and the executor
output it leaves is read with KFP's own ``ExecutorOutput`` message (strict, as the backend's
launcher is); the same step under ``kfp.local`` in a container: tests/e2e/test_kfp_docker.py.

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters import progress_app
from tests.adapters.kfp import components as c
from tether.adapters.kfp import KubernetesOptions, NativeStepError, step
from tether.errors import SpecTypeError
from tether.specs import AppDef, Role

METRICS = KubernetesOptions(metrics=True)


def compiled(make_tasks: Any, tmp_path: Path) -> dict[str, Any]:
    """The pipeline spec of a one-parameter pipeline whose body is ``make_tasks(msg)``."""
    from kfp import compiler, dsl

    @dsl.pipeline(name="metrics")
    def pipeline(msg: str = "hi") -> None:
        make_tasks(msg)

    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    with open(path) as f:
        return dict(next(yaml.safe_load_all(f)))


def test_the_step_gets_the_artifact_and_its_command_runs_through_env(tmp_path: Path) -> None:
    with_metrics = step(c.hello, name="with_metrics", k8s=METRICS)
    plain = step(c.hello, name="plain")
    spec = compiled(lambda msg: (with_metrics(msg=msg), plain(msg=msg)), tmp_path)

    execs, comps = spec["deploymentSpec"]["executors"], spec["components"]
    assert execs["exec-with-metrics"]["container"]["command"] == [
        "env",
        "TETHER_KFP_EXECUTOR_INPUT={{$}}",
        "TETHER_KFP_METRICS_PATH={{$.outputs.artifacts['tether_metrics'].path}}",
        "echo",
    ]
    assert execs["exec-with-metrics"]["container"]["args"] == [
        "{{$.inputs.parameters['msg']}}"]  # the job's own argv, as without metrics
    out = comps["comp-with-metrics"]["outputDefinitions"]["artifacts"]["tether_metrics"]
    assert out["artifactType"]["schemaTitle"] == "system.Metrics"
    # without the option the step is what it was: no wrapper, no artifact
    assert execs["exec-plain"]["container"]["command"] == ["echo"]
    assert "outputDefinitions" not in comps["comp-plain"]


def test_the_compiled_command_fills_what_kfp_reads(tmp_path: Path) -> None:
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    train = step(progress_app.training_in_image, k8s=METRICS)
    spec = compiled(lambda msg: train(gate=msg), tmp_path)
    container = spec["deploymentSpec"]["executors"]["exec-training-in-image"]["container"]

    task = tmp_path / "root" / "task"
    gate = tmp_path / "gate"
    gate.touch()  # the job reports 1/4, finds its gate, reports 4/4
    artifact = {"name": "tether_metrics", "uri": str(task / "tether_metrics"), "metadata": {},
                "type": {"schemaTitle": "system.Metrics", "schemaVersion": "0.0.1"}}
    executor_input = {"inputs": {"parameterValues": {"gate": str(gate)}}, "outputs": {
        "artifacts": {"tether_metrics": {"artifacts": [artifact]}},
        "outputFile": str(task / "executor_output.json")}}
    values = {"{{$}}": json.dumps(executor_input),
              "{{$.outputs.artifacts['tether_metrics'].path}}": artifact["uri"],
              "{{$.inputs.parameters['gate']}}": str(gate)}

    def fill(arg: str) -> str:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        return arg

    argv = [fill(a) for a in container["command"] + container["args"]]
    assert not [a for a in argv if "{{" in a]  # every placeholder is one KFP fills
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable),
                                                  os.environ.get("PATH", "")])}
    env.pop("TETHER_OUTPUTS_URL", None)
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr

    out = pipeline_spec_pb2.ExecutorOutput()  # unknown fields are an error, as in the backend
    json_format.Parse((task / "executor_output.json").read_text(), out)
    got = out.artifacts["tether_metrics"].artifacts[0]
    assert got.uri == artifact["uri"]
    assert json_format.MessageToDict(got.metadata) == {
        "loss": 0.125, "step": 4.0, "total": 4.0, "eta_s": 0.0}
    saved = json.loads((task / "tether_metrics").read_text())
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"loss": 0.125})


def _image_entrypoint(msg: str = "hi") -> AppDef:
    return AppDef("img", [Role("img", image="localhost/bb:latest", args=[msg])])


def _assignment(msg: str = "hi") -> AppDef:
    return AppDef("odd", [Role("odd", image="localhost/bb:latest", entrypoint="A=b",
                               args=[msg])])


@pytest.mark.parametrize(("component", "expected"), [
    (_image_entrypoint, "role 'img': entrypoint is empty; KubernetesOptions(metrics=True)"),
    (_assignment, "role 'odd': entrypoint='A=b'; `env` would read it as a variable"),
])
def test_a_command_env_cannot_run_is_rejected_naming_the_role(component: Any,
                                                              expected: str) -> None:
    assert step(component).plan().mode == "native"  # fine without the option
    with pytest.raises(NativeStepError, match="cannot run as a native KFP step") as e:
        step(component, k8s=METRICS).plan()
    assert expected in str(e.value)


def test_a_launcher_step_has_the_artifact_anyway() -> None:
    plan = step(c.hello, scheduler="local_cwd", k8s=METRICS).plan(msg="hi")
    assert plan.mode == "launcher"


def test_the_option_is_a_bool() -> None:
    with pytest.raises(SpecTypeError, match=r"KubernetesOptions.metrics='yes' is not allowed"):
        KubernetesOptions(metrics="yes")  # type: ignore[arg-type]
