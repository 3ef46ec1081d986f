"""Pipelines of the KFP adapter tests: what the golden files are compiled from.

No ``from __future__ import annotations`` here: KFP reads pipeline parameter types from real
annotations.
"""

from pathlib import Path
from typing import Any

from tests.adapters.kfp import components as c
from tether.adapters.kfp import KubernetesOptions, LauncherOptions, step

LAUNCHER_IMAGE = "registry.example.com/tether/launcher:1.0"
_LAUNCHER = LauncherOptions(image=LAUNCHER_IMAGE, wait_interval=2.0, retries=1)


def native_pipeline() -> Any:
    """Native steps: pipeline values, GPUs and a named resource, env, retries, a PVC, pod
    settings, macros, and the trainer's progress reports in its ``tether_metrics``."""
    from kfp import dsl

    hello = step(c.hello, image="localhost/bb:latest")
    train = step(
        c.trainer,
        env={"WANDB_MODE": "offline"},
        k8s=KubernetesOptions(
            accelerator_type="nvidia.com/a100",
            gpu_toleration=True,
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml",
                          "effect": "NoSchedule"}],
            shm_size="8Gi",
            image_pull_secrets=["regcred"],
            metrics=True,
        ),
    )
    tagged = step(c.tagged)

    @dsl.pipeline(name="tether-native", description="native KFP steps")
    def pipeline(msg: str = "hello from kfp", lr: str = "0.01") -> None:
        first = hello(msg=msg)
        trained = train(lr=lr, epochs=5, h="aws_p3.2xlarge", data_pvc="imagenet")
        trained.after(first)
        tagged(msg=msg)

    return pipeline


def launcher_pipeline() -> Any:
    """Launcher steps: a multi-role app on Kubernetes with task settings for its job, typed
    outputs wired downstream, run options and a forced launcher step."""
    from kfp import dsl, kubernetes

    pair = step(c.pair, launcher=_LAUNCHER)
    publish = step(
        c.publish, scheduler="local_cwd", cfg={"grace_period": 5.0},
        outputs={"message": str, "length": int, "ratio": float}, launcher=_LAUNCHER,
    )
    shout = step(c.shout, mode="launcher", launcher=_LAUNCHER, env={"TEAM": "ml"})

    @dsl.pipeline(name="tether-launcher", description="launcher KFP steps")
    def pipeline(msg: str = "hi") -> None:
        # the task's settings are the job's: env, secrets, resources, node selector, toleration
        served = pair(msg=msg)
        served.set_env_variable("WANDB_MODE", "offline")
        served.set_cpu_limit("2").set_memory_limit("8Gi").set_accelerator_limit(1)
        kubernetes.use_secret_as_env(served, secret_name="hf",
                                     secret_key_to_env={"token": "HF_TOKEN"})
        kubernetes.add_node_selector(served, label_key="pool", label_value="a100")
        kubernetes.add_toleration(served, key="nvidia.com/gpu", operator="Exists",
                                  effect="NoSchedule")
        out = publish(msg=msg, times=3)
        shout(msg=out.outputs["message"], times=out.outputs["length"])

    return pipeline


def typed_pipeline() -> Any:
    """Typed pipeline parameters: native where they only reach the command (int, float,
    bool, str), launcher where the number of replicas depends on one (with a warning)."""
    from kfp import dsl

    fit = step(c.fit, k8s=KubernetesOptions(accelerator_type="nvidia.com/a100"))
    workers = step(c.workers, launcher=_LAUNCHER)

    @dsl.pipeline(name="tether-typed", description="typed pipeline parameters")
    def pipeline(lr: float = 0.01, epochs: int = 3, fp16: bool = True, tag: str = "exp",
                 replicas: int = 2, gpus: int = 2) -> None:
        fit(lr=lr, epochs=epochs, fp16=fp16, tag=tag, gpu=gpus)
        workers(msg=tag, n=replicas)

    return pipeline


def last_report_of(loaded: Any, name: str, gate_dir: Path) -> Any:
    """Runs a pipeline of one step of a loaded tether component (a ``gate`` parameter) on
    the KFP local runner the test set up, its job's gate open, and returns the step's
    ``tether_metrics``: the job's last progress report."""
    from kfp import dsl
    from kfp.dsl import Metrics

    @dsl.pipeline(name=name)
    def pipeline(gate: str) -> Metrics:
        return loaded(gate=gate).outputs["tether_metrics"]

    gate = gate_dir / "gate"
    gate.touch()  # the job runs through: the artifact holds its last report
    return pipeline(gate=str(gate)).output
