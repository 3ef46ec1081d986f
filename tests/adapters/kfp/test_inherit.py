"""Launcher jobs get the step's settings: env, secrets (by reference), resources, node
selectors, tolerations, the pipeline's namespace; their outputs go under the pipeline root.

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tests.adapters.kfp.test_golden import launch_spec_in
from tether.adapters.common import materialize, render_dryrun
from tether.adapters.kfp import LauncherOptions, step
from tether.adapters.kfp.inherit import LauncherTaskError, memory_mb
from tether.adapters.kfp.launch import inherit_settings, pipeline_outputs_root
from tether.adapters.kfp.spec import LaunchSpec
from tether.specs import SecretRef

pytestmark = pytest.mark.filterwarnings(
    "ignore:You may be attemping to run a task:RuntimeWarning")  # kfp.local: image name

COMP = "tests.adapters.kfp.components"
FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)


def _spec() -> LaunchSpec:
    return LaunchSpec(
        component=f"{COMP}:pair", scheduler="kubernetes", env={"WANDB_MODE": "offline"},
        cfg={"tolerations": ["dedicated=ml:NoSchedule"]},
        inherit={"resource": {"cpu": 0.5, "memMB": 2048, "gpu": 2},
                 "secrets": {"HF_TOKEN": ["hf", "token"]},
                 "node_selector": {"pool": "a100"},
                 "tolerations": ["nvidia.com/gpu:NoSchedule"]},
    )


def test_settings_reach_every_role_and_the_kubernetes_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_KFP_NAMESPACE", "team-a")  # what the downward API sets
    spec = _spec()
    app = materialize(spec.component, {}, env=spec.env)
    cfg = inherit_settings(app, spec)
    assert cfg["namespace"] == "team-a"
    for role in app.roles:
        assert role.secrets == {"HF_TOKEN": SecretRef("hf", "token")}
        assert (role.resource.cpu, role.resource.memMB, role.resource.gpu) == (0.5, 2048, 2)
        assert role.env["WANDB_MODE"] == "offline"
    _, info = render_dryrun(app, "kubernetes", cfg)
    docs = [d for d in yaml.safe_load_all(str(info)) if d and d["kind"] == "Job"]
    assert len(docs) == 3  # server + 2 clients
    for job in docs:
        assert job["metadata"]["namespace"] == "team-a"
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "a100"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
            pod["tolerations"]
        assert {"key": "dedicated", "operator": "Equal", "value": "ml",
                "effect": "NoSchedule"} in pod["tolerations"]  # the step's run option stays
        limits = pod["containers"][0]["resources"]["limits"]
        assert limits["cpu"] == "500m" and limits["nvidia.com/gpu"] == "2"


def test_namespace_run_option_wins_over_the_pipelines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_KFP_NAMESPACE", "team-a")
    spec = LaunchSpec(component=f"{COMP}:pair", scheduler="kubernetes", cfg={"namespace": "ml"})
    assert inherit_settings(materialize(spec.component, {}), spec)["namespace"] == "ml"
    other = LaunchSpec(component=f"{COMP}:publish", scheduler="local_cwd")
    assert "namespace" not in inherit_settings(materialize(other.component, {"msg": "x"}), other)


def test_outputs_root_under_the_pipeline_root() -> None:
    assert pipeline_outputs_root("gs://bucket/root/") == "gs://bucket/root/tether-outputs"
    assert pipeline_outputs_root("minio://mlpipeline/v2/artifacts") == \
        "s3://mlpipeline/v2/artifacts/tether-outputs"


def test_pipeline_values_and_bad_quantities_in_settings_are_explained(tmp_path: Path) -> None:
    from kfp import dsl

    pair = step(f"{COMP}:pair")
    with pytest.raises(LauncherTaskError, match=r"the CPU limit is a pipeline value"):
        @dsl.pipeline(name="bad")
        def bad(cpu: str = "2") -> None:
            pair(msg="x").set_cpu_limit(cpu)
    with pytest.raises(LauncherTaskError, match=r"memory '16 GB' is not a quantity"):
        memory_mb("16 GB")
    assert memory_mb("1G") == 954 and memory_mb("512Mi") == 512


def test_launcher_job_runs_with_the_steps_env_and_secret_refs(
        kfp_subprocess: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import compiler, dsl, kubernetes

    report = step(f"{COMP}:report", scheduler="local_cwd", launcher=FAST, outputs=["seen"])

    @dsl.pipeline(name="inherit")
    def pipeline() -> str:
        t = report(name="TEAM")
        t.set_env_variable("TEAM", "ml-platform")
        kubernetes.use_secret_as_env(t, secret_name="hf", secret_key_to_env={"token": "HF_TOKEN"})
        return t.outputs["seen"]

    out = kfp_subprocess.parent / "inherit.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    text = out.read_text()
    assert "secretAsEnv" in text and "HF_TOKEN" in text
    shipped = launch_spec_in(next(yaml.safe_load_all(text))["deploymentSpec"]["executors"][
        "exec-report"]["container"]["command"][-1])
    assert shipped.inherit["secrets"] == {"HF_TOKEN": ["hf", "token"]}

    capfd.readouterr()
    task = pipeline()
    assert task.output == "ml-platform"  # the job saw the task's env variable
    log = capfd.readouterr().out
    assert "report/0 TEAM=ml-platform" in log
    assert "[tether] secrets by reference: HF_TOKEN=secret:hf/token" in log
    # outputs went under the pipeline root (they outlive the launcher's pod)
    published = list((kfp_subprocess / "tether-outputs" / "local_cwd").glob("*/seen.json"))
    assert len(published) == 1, list(kfp_subprocess.rglob("*"))


def test_secrets_are_references_in_both_modes_never_values(tmp_path: Path) -> None:
    from kfp import compiler, dsl, kubernetes

    value = "s3cr3t-value-never-in-ir"

    hello = step(c.hello, secrets={"HF_TOKEN": SecretRef("hf", "token")})
    pair = step(f"{COMP}:pair", secrets={"HF_TOKEN": SecretRef("hf", "token")})

    @dsl.pipeline(name="secrets")
    def pipeline() -> None:
        hello(msg="x")
        t = pair(msg="y")
        kubernetes.use_secret_as_env(t, secret_name="wandb",
                                     secret_key_to_env={"api-key": "WANDB_API_KEY"})

    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    text = out.read_text()
    assert value not in text
    spec, platform = list(yaml.safe_load_all(text))
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # native: the pod mounts the Secret as env
    assert executors["exec-hello"]["secretAsEnv"][0]["secretName"] == "hf"
    assert executors["exec-hello"]["secretAsEnv"][0]["keyToEnv"] == [
        {"envVar": "HF_TOKEN", "secretKey": "token"}]
    # launcher: the job gets both references (the step's and the task's)
    shipped = launch_spec_in(spec["deploymentSpec"]["executors"]["exec-pair"]["container"][
        "command"][-1])
    assert shipped.inherit["secrets"] == {"HF_TOKEN": ["hf", "token"],
                                          "WANDB_API_KEY": ["wandb", "api-key"]}
    with pytest.raises(ValueError, match=r"secrets\['HF_TOKEN'\] = str: give a "
                                         r"tether.specs.SecretRef"):
        step(c.hello, secrets={"HF_TOKEN": value})  # type: ignore[dict-item]

