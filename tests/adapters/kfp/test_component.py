"""A tether step is a real KFP component: component_spec, YAML that KFP loads back, and use
inside other pipelines (kfp.local runs them for real).

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tests.adapters.kfp.pipelines import last_report_of
from tether.adapters.kfp import KubernetesOptions, LauncherOptions, StepArgumentError, step

pytestmark = pytest.mark.filterwarnings(
    "ignore:You may be attemping to run a task:RuntimeWarning")  # kfp.local: image name

COMP = "tests.adapters.kfp.components"
FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)


def test_step_has_a_component_spec_and_loads_back_with_its_settings(tmp_path: Path) -> None:
    from kfp import compiler, components, dsl

    fit = step(c.fit)
    spec = fit.as_component(image="registry.example.com/fit:2", gpu=2).component_spec
    assert set(spec.inputs) == {"lr", "epochs", "fp16", "tag"}  # the fixed ones are gone
    assert spec.inputs["epochs"].type == "Integer"

    loaded = components.load_component_from_text(fit.to_yaml(image="registry.example.com/fit:2",
                                                              gpu=2))
    assert loaded.name == "tether-fit"
    assert set(loaded.component_spec.inputs) == {"lr", "epochs", "fp16", "tag"}

    @dsl.pipeline(name="uses-loaded")
    def pipeline(lr: float = 0.1) -> None:
        loaded(lr=lr, epochs=5)

    out = tmp_path / "uses.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    doc = next(yaml.safe_load_all(out.read_text()))
    container = doc["deploymentSpec"]["executors"]["exec-fit"]["container"]
    # the step's task settings survived the round trip: image, GPUs, CPU, retries
    assert container["image"] == "registry.example.com/fit:2"
    assert container["resources"]["accelerator"]["resourceCount"] == "2"
    assert container["resources"]["resourceCpuLimit"] == "4"
    inner = doc["components"]["comp-tether-fit"]["dag"]["tasks"]["fit"]
    assert inner["retryPolicy"]["maxRetryCount"] == 3


def test_fixing_an_unknown_parameter_is_explained() -> None:
    with pytest.raises(StepArgumentError, match=r"has no parameter 'gpus'; did you mean gpu\?"):
        step(c.fit).as_component(gpus=2)


def test_steps_inside_a_sub_pipeline_and_a_loaded_component_run(
        kfp_subprocess: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import components, dsl

    publish = step(f"{COMP}:publish", scheduler="local_cwd", launcher=FAST,
                   outputs={"message": str, "length": int})
    report = step(f"{COMP}:report", scheduler="local_cwd", launcher=FAST, outputs=["seen"])

    @dsl.pipeline(name="inner")
    def inner(msg: str = "x") -> str:
        return publish(msg=msg, times=1).outputs["message"]

    # steps as components, through YAML (as another team would share them)
    loaded_publish = components.load_component_from_text(publish.to_yaml(times=1))
    assert set(loaded_publish.component_spec.outputs) == {"message", "length", "tether_metrics"}
    loaded_report = components.load_component_from_text(report.to_yaml())

    @dsl.pipeline(name="outer")
    def outer(msg: str = "nested") -> str:
        shouted = inner(msg=msg)
        again = loaded_publish(msg=shouted.output)  # a loaded component's outputs flow on
        loaded_report(name="TEAM").after(again)
        return again.outputs["message"]

    task = outer()
    assert task.output == "NESTED"
    log = capfd.readouterr().out
    assert "publish/0 line 0: nested" in log and "publish/0 line 0: NESTED" in log
    assert "report/0 TEAM=<unset>" in log


BB = "localhost/bb:latest"


@pytest.mark.parametrize(("make", "fixed", "has_metrics"), [
    (lambda: step(c.hello, scheduler="local_cwd"), {}, True),  # launcher
    (lambda: step(c.hello, k8s=KubernetesOptions(metrics=True)), {"image": BB}, True),
    (lambda: step(c.hello), {"image": BB}, False),  # native, no artifact asked for
    # auto: native with the constant, a launcher step when the pipeline gives the value
    (lambda: step(c.scaled), {"epochs": 3, "image": BB}, False),
    (lambda: step(c.scaled), {"image": BB}, True),
], ids=["launcher", "native-metrics", "native", "auto-native", "auto-launcher"])
@pytest.mark.filterwarnings("ignore::tether.adapters.kfp.LauncherFallbackWarning")
def test_the_component_has_the_metrics_output_when_its_task_has_it(
        make: Any, fixed: dict[str, Any], has_metrics: bool, tmp_path: Path) -> None:
    from kfp import compiler, components, dsl
    from kfp.dsl import Metrics

    tether_step = make()
    outputs = tether_step.as_component(**fixed).component_spec.outputs or {}
    assert ("tether_metrics" in outputs) == has_metrics
    loaded = components.load_component_from_text(tether_step.to_yaml(**fixed))
    loaded_outputs = loaded.component_spec.outputs or {}
    assert ("tether_metrics" in loaded_outputs) == has_metrics
    if not has_metrics:
        return
    assert loaded_outputs["tether_metrics"].type == "system.Metrics@0.0.1"

    @dsl.pipeline(name="reads-metrics")
    def pipeline() -> Metrics:
        return loaded().outputs["tether_metrics"]

    out = tmp_path / "reads.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    doc = next(yaml.safe_load_all(out.read_text()))
    # the pipeline's output is the loaded component's artifact, which is its step's
    selector = doc["root"]["dag"]["outputs"]["artifacts"]["Output"]["artifactSelectors"][0]
    assert selector["outputArtifactKey"] == "tether_metrics"
    inner = doc["components"][f"comp-{loaded.name}"]["dag"]["outputs"]["artifacts"]
    assert inner["tether_metrics"]["artifactSelectors"][0] == {
        "outputArtifactKey": "tether_metrics", "producerSubtask": tether_step.name}


def test_a_loaded_components_metrics_hold_the_jobs_last_report(kfp_subprocess: Path,
                                                              tmp_path: Path) -> None:
    from kfp import components
    from kfp.dsl import Metrics

    train = step("tests.adapters.progress_app:training", scheduler="local_cwd", launcher=FAST)
    loaded = components.load_component_from_text(train.to_yaml())
    metrics = last_report_of(loaded, "component-metrics", tmp_path)

    assert isinstance(metrics, Metrics)
    assert (metrics.metadata["step"], metrics.metadata["total"]) == (4, 4)
    assert metrics.metadata["loss"] == 0.125
    with open(metrics.path, encoding="utf-8") as f:
        saved = json.load(f)
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"loss": 0.125})
