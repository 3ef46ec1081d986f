"""Golden files of compiled pipelines with native and launcher steps.

Regenerate with ``TETHER_REGEN_GOLDEN=1 pytest tests/adapters/kfp/test_golden.py`` and review
the diff. Volatile lines (the KFP SDK version) are stripped before comparing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import pipelines
from tests.golden import GoldenDir
from tether.adapters.kfp.spec import LaunchSpec

GOLDEN = GoldenDir(Path(__file__).parent / "golden")
_VOLATILE = re.compile(r"^sdkVersion: .*\n", re.MULTILINE)


def compile_text(make: Callable[[], Any], tmp_path: Path) -> tuple[str, Path]:
    from kfp import compiler

    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(make(), str(path))
    return _VOLATILE.sub("", path.read_text()), path


def launch_spec_in(source: str) -> LaunchSpec:
    """The LaunchSpec a launcher step's generated code passes to run_step."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "run_step":
            return LaunchSpec.from_json(ast.literal_eval(node.args[0]))
    raise AssertionError("no run_step call in the launcher step's code")


def docs(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pipeline spec and the Kubernetes platform spec of a compiled file."""
    with open(path) as f:
        parts = list(yaml.safe_load_all(f))
    platform = parts[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] if len(
        parts) > 1 else {}
    return parts[0], platform


def test_native_pipeline_golden(tmp_path: Path) -> None:
    from kfp import components

    text, path = compile_text(pipelines.native_pipeline, tmp_path)
    GOLDEN.check("native_pipeline.yaml", text)

    loaded = components.load_component_from_file(str(path))  # KFP's own loader
    assert loaded.name == "tether-native"
    assert set(loaded.component_spec.inputs or {}) == {"msg", "lr"}

    spec, platform = docs(path)
    execs = spec["deploymentSpec"]["executors"]
    hello = execs["exec-hello"]["container"]
    assert hello["image"] == "localhost/bb:latest"
    assert hello["command"] == ["echo"]  # no metrics asked for: the command as it is
    assert hello["args"] == ["{{$.inputs.parameters['msg']}}"]
    comps = spec["components"]
    assert "outputDefinitions" not in comps["comp-hello"]

    trainer = execs["exec-trainer"]["container"]
    assert trainer["image"] == "registry.example.com/team/trainer:1.0"
    # KubernetesOptions(metrics=True): the job's reports reach its Metrics artifact
    assert trainer["command"] == [
        "env", "TETHER_KFP_EXECUTOR_INPUT={{$}}",
        "TETHER_KFP_METRICS_PATH={{$.outputs.artifacts['tether_metrics'].path}}", "python"]
    metrics = comps["comp-trainer"]["outputDefinitions"]["artifacts"]["tether_metrics"]
    assert metrics["artifactType"]["schemaTitle"] == "system.Metrics"
    assert trainer["args"][:6] == ["-m", "trainer.main", "--lr",
                                   "{{$.inputs.parameters['lr']}}", "--epochs", "5"]
    # ${app_id} -> run id - task id (hidden inputs), ${replica_id} -> 0
    assert trainer["args"][6:] == [
        "--run-id",
        "{{$.inputs.parameters['tether_kfp_run_id']}}-"
        "{{$.inputs.parameters['tether_kfp_task_id']}}",
        "--rank", "0",
    ]
    assert {e["name"]: e["value"] for e in trainer["env"]} == {
        "DATA_DIR": "/data", "LOGLEVEL": "INFO", "WANDB_MODE": "offline"}
    res = trainer["resources"]
    # the named resource aws_p3.2xlarge: 8 vCPU, 1 GPU, 61 GiB
    assert res["resourceCpuLimit"] == "8" and res["resourceCpuRequest"] == "8"
    assert res["resourceMemoryLimit"] == f"{61 * 983}Mi"
    assert res["accelerator"]["resourceType"] == "nvidia.com/a100"
    assert res["accelerator"]["resourceCount"] == "1"

    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["trainer"]["retryPolicy"]["maxRetryCount"] == 2
    assert tasks["trainer"]["inputs"]["parameters"]["tether_kfp_run_id"] == {
        "runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
    assert tasks["trainer"]["dependentTasks"] == ["hello"]

    pod = platform["exec-trainer"]
    assert pod["nodeSelector"]["labels"] == {"node.kubernetes.io/instance-type": "p3.2xlarge"}
    assert pod["pvcMount"][0]["mountPath"] == "/data"
    assert pod["pvcMount"][0]["pvcNameParameter"]["runtimeValue"]["constant"] == "imagenet"
    assert {"key": "nvidia.com/a100", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in \
        pod["tolerations"]
    assert pod["emptyDirMounts"] == [{"medium": "Memory", "mountPath": "/dev/shm",
                                      "sizeLimit": "8Gi", "volumeName": "dshm"}]
    assert pod["imagePullSecret"] == [{"secretName": "regcred",
                                       "secretNameParameter": {"runtimeValue": {
                                           "constant": "regcred"}}}]

    tagged = execs["exec-tagged"]["container"]
    assert tagged["args"] == [
        "msg={{$.inputs.parameters['msg']}}",
        "app={{$.inputs.parameters['tether_kfp_run_id']}}-"
        "{{$.inputs.parameters['tether_kfp_task_id']}}",
        "replica=0",
    ]


def test_launcher_pipeline_golden(tmp_path: Path) -> None:
    from kfp import components

    text, path = compile_text(pipelines.launcher_pipeline, tmp_path)
    GOLDEN.check("launcher_pipeline.yaml", text)

    loaded = components.load_component_from_file(str(path))
    assert loaded.name == "tether-launcher"

    spec, platform = docs(path)
    # Kubernetes launcher pods learn the pipeline's namespace (downward API) for their job
    assert platform["exec-pair"]["fieldPathAsEnv"] == [
        {"fieldPath": "metadata.namespace", "name": "TETHER_KFP_NAMESPACE"}]
    assert "exec-publish" not in platform  # local_cwd: no namespace
    # the task's settings are the job's: in the step's spec, secrets by reference only
    pair_spec = launch_spec_in(spec["deploymentSpec"]["executors"]["exec-pair"]["container"][
        "command"][-1])
    assert pair_spec.env == {"WANDB_MODE": "offline"}
    assert pair_spec.inherit == {
        "resource": {"cpu": 2.0, "memMB": 8192, "gpu": 1},
        "secrets": {"HF_TOKEN": ["hf", "token"]},
        "node_selector": {"pool": "a100"},
        "tolerations": ["nvidia.com/gpu:NoSchedule"],
    }
    # ... and the launcher pod does not hold the job's resources
    assert "resources" not in spec["deploymentSpec"]["executors"]["exec-pair"]["container"]
    comps = spec["components"]
    publish = comps["comp-publish"]
    assert set(publish["outputDefinitions"]["parameters"]) == {
        "app_handle", "outputs", "message", "length", "ratio"}
    assert publish["outputDefinitions"]["parameters"]["length"]["parameterType"] == \
        "NUMBER_INTEGER"
    assert set(publish["inputDefinitions"]["parameters"]) == {
        "msg", "times", "fail", "tether_kfp_run_id", "tether_kfp_task_name",
        "tether_kfp_task_id", "tether_kfp_pipeline_root"}
    for name in ("comp-pair", "comp-publish", "comp-shout"):  # the job's last progress report
        metrics = comps[name]["outputDefinitions"]["artifacts"]["tether_metrics"]
        assert metrics["artifactType"]["schemaTitle"] == "system.Metrics"

    execs = spec["deploymentSpec"]["executors"]
    for name in ("exec-pair", "exec-publish", "exec-shout"):
        container = execs[name]["container"]
        assert container["image"] == pipelines.LAUNCHER_IMAGE
        source = container["command"][-1]
        assert "pip install" not in " ".join(container["command"])
        assert "_tether_launch.run_step(" in source
    spec_of_publish = launch_spec_in(execs["exec-publish"]["container"]["command"][-1])
    assert spec_of_publish.component == "tests.adapters.kfp.components:publish"
    assert spec_of_publish.scheduler == "local_cwd"
    assert spec_of_publish.cfg == {"grace_period": 5.0}
    assert spec_of_publish.outputs == [("message", "str"), ("length", "int"), ("ratio", "float")]
    # the component's module ships with the step (the cluster need not have it)
    assert spec_of_publish.source is not None
    assert spec_of_publish.source["module"] == "tests.adapters.kfp.components"
    assert "def publish(" in spec_of_publish.source["text"]
    assert launch_spec_in(execs["exec-shout"]["container"]["command"][-1]).env == {"TEAM": "ml"}

    tasks = spec["root"]["dag"]["tasks"]
    shout = tasks["shout"]
    assert shout["inputs"]["parameters"]["msg"] == {"taskOutputParameter": {
        "outputParameterKey": "message", "producerTask": "publish"}}
    assert shout["inputs"]["parameters"]["times"]["taskOutputParameter"][
        "outputParameterKey"] == "length"
    for t in tasks.values():
        assert t["cachingOptions"] == {}  # never cached: a job is a side effect
        assert t["retryPolicy"]["maxRetryCount"] == 1
        assert t["inputs"]["parameters"]["tether_kfp_task_id"] == {
            "runtimeValue": {"constant": "{{$.pipeline_task_uuid}}"}}
        assert t["inputs"]["parameters"]["tether_kfp_pipeline_root"] == {
            "runtimeValue": {"constant": "{{$.pipeline_root}}"}}


def test_typed_pipeline_golden(tmp_path: Path) -> None:
    from tether.adapters.kfp.steps import LauncherFallbackWarning

    with pytest.warns(LauncherFallbackWarning) as warned:
        text, path = compile_text(pipelines.typed_pipeline, tmp_path)
    GOLDEN.check("typed_pipeline.yaml", text)
    # one warning, at compile time, naming the step and the parameter
    messages = [str(w.message) for w in warned]
    assert len(messages) == 1
    assert messages[0].startswith("KFP step 'workers' (tests.adapters.kfp.components:workers) "
                                  "runs in launcher mode")
    assert "parameter 'n' decides role 'worker' num_replicas (the job's shape)" in messages[0]

    spec, platform = docs(path)
    fit_inputs = spec["components"]["comp-fit"]["inputDefinitions"]["parameters"]
    assert {n: fit_inputs[n]["parameterType"] for n in ("lr", "epochs", "fp16", "tag")} == {
        "lr": "NUMBER_DOUBLE", "epochs": "NUMBER_INTEGER", "fp16": "BOOLEAN", "tag": "STRING"}
    fit = spec["deploymentSpec"]["executors"]["exec-fit"]["container"]
    assert fit["command"] == ["python"]  # native: the job's own container, no launcher
    assert fit["args"] == [
        "-m", "trainer.fit", "--lr={{$.inputs.parameters['lr']}}",
        "--epochs", "{{$.inputs.parameters['epochs']}}",
        "--fp16", "{{$.inputs.parameters['fp16']}}",
        "--tag", "{{$.inputs.parameters['tag']}}",
    ]
    assert fit["resources"]["accelerator"]["resourceType"] == "nvidia.com/a100"
    # the GPU count is the pipeline parameter gpus: KFP fills it in
    assert fit["resources"]["accelerator"]["resourceCount"] == \
        "{{$.inputs.parameters['pipelinechannel--gpus']}}"
    assert fit["resources"]["resourceCpuLimit"] == "4"
    assert fit["resources"]["resourceMemoryLimit"] == "16384Mi"
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["fit"]["retryPolicy"]["maxRetryCount"] == 3
    assert tasks["fit"]["inputs"]["parameters"]["epochs"] == {
        "componentInputParameter": "epochs"}
    # one caching default for both modes: off (a job has effects outside the step)
    assert tasks["fit"]["cachingOptions"] == {} and tasks["workers"]["cachingOptions"] == {}

    workers = spec["deploymentSpec"]["executors"]["exec-workers"]["container"]
    assert workers["image"] == pipelines.LAUNCHER_IMAGE
    assert "_tether_launch.run_step(" in workers["command"][-1]
    assert tasks["workers"]["inputs"]["parameters"]["n"] == {
        "componentInputParameter": "replicas"}
    assert set(platform["exec-workers"]) == {"fieldPathAsEnv"}  # namespace only
