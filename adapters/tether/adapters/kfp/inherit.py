"""Launcher tasks pass the step's settings to the job they launch.

A launcher task is configured like any KFP task, after the call that creates it::

    t = train(script="train.py")
    t.set_env_variable("WANDB_MODE", "offline")
    t.set_cpu_limit("8").set_memory_limit("32Gi").set_accelerator_limit(2)
    kubernetes.use_secret_as_env(t, secret_name="hf", secret_key_to_env={"token": "HF_TOKEN"})
    kubernetes.add_node_selector(t, label_key="pool", label_value="a100")
    kubernetes.add_toleration(t, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")

and those settings are meant for the job, not for the small pod that launches it. So a
launcher task is a :class:`~kfp.dsl.pipeline_task.PipelineTask` whose:

* resource setters (CPU, memory, accelerator) record the request for **every replica of
  every role** of the job, and leave the launcher pod's own resources alone;
* env variables and kfp-kubernetes settings (secrets as env, node selectors, tolerations)
  apply to the launcher pod as KFP sets them, and also to the job: env added to every role,
  each secret a :class:`tether.specs.SecretRef` in :attr:`Role.secrets` (the name of the
  Secret and the key travel in the step, never the value), node selectors and tolerations as
  the ``kubernetes`` scheduler's run options.

The settings are read when the pipeline is compiled (KFP reads the task's container spec
last), and written into the step's :class:`~tether.adapters.kfp.spec.LaunchSpec`.
"""

from __future__ import annotations

import re
from typing import Any

from kfp.dsl import pipeline_channel, structures
from kfp.dsl.pipeline_task import PipelineTask

from tether.adapters.kfp.spec import LaunchSpec
from tether.errors import SpecError

_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


class LauncherTaskError(SpecError):
    """A launcher task's setting cannot be passed to the job (the message names it)."""


def _constant(task: PipelineTask, what: str, value: Any) -> str:
    if isinstance(value, pipeline_channel.PipelineChannel):
        raise LauncherTaskError(
            f"task {task.name!r}: {what} is a pipeline value; a launcher step passes its "
            "settings to the job when the pipeline is compiled, so give a constant")
    return str(value)


def cpu_value(text: str) -> float:
    """A Kubernetes CPU quantity as cores (``500m`` -> 0.5).

    Args:
        text: The quantity.

    Returns:
        Cores.

    Raises:
        LauncherTaskError: For text that is not a CPU quantity.
    """
    t = text.strip()
    try:
        return float(t[:-1]) / 1000 if t.endswith("m") else float(t)
    except ValueError:
        raise LauncherTaskError(f"CPU {text!r} is not a quantity like 2, 0.5 or 500m") from None


def memory_mb(text: str) -> int:
    """A Kubernetes memory quantity as MiB (``16Gi`` -> 16384, ``1G`` -> 954).

    Args:
        text: The quantity.

    Returns:
        MiB, rounded up.

    Raises:
        LauncherTaskError: For text that is not a memory quantity.
    """
    m = _QUANTITY.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise LauncherTaskError(
            f"memory {text!r} is not a quantity like 512Mi, 16Gi or 1G")
    total = float(m.group(1)) * _UNITS[unit]
    return max(1, -(-int(total) // 1024**2))


def _toleration_text(tol: dict[str, Any]) -> str:
    text = str(tol.get("key", ""))
    if tol.get("operator", "Equal") != "Exists" and tol.get("value"):
        text += f"={tol['value']}"
    if tol.get("effect"):
        text += f":{tol['effect']}"
    return text


def _secrets(task: PipelineTask, k8s: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for entry in k8s.get("secretAsEnv", []):
        param = entry.get("secretNameParameter") or {}
        name = entry.get("secretName") or param.get("runtimeValue", {}).get("constant")
        if not name:
            raise LauncherTaskError(
                f"task {task.name!r}: the name of a secret used as env is a pipeline value; a "
                "launcher step passes secret references to the job when the pipeline is "
                "compiled, so give the Secret's name as a constant")
        for pair in entry.get("keyToEnv", []):
            out[str(pair["envVar"])] = [str(name), str(pair.get("secretKey", ""))]
    return out


class LauncherTask(PipelineTask):
    """A launcher step's task: its settings go to the job (see the module's docs)."""

    _tether_spec: LaunchSpec
    _tether_resource: dict[str, Any]
    _tether_template: list[str]

    def _tether_bind(self, spec: LaunchSpec) -> None:
        self._tether_spec = spec
        self._tether_resource = {}
        stored = self.__dict__["container_spec"]
        self._tether_template = list(stored.command or [])

    def inherited(self) -> LaunchSpec:
        """The step's spec with the task's current settings for the job.

        Returns:
            A new spec.
        """
        stored: structures.ContainerSpecImplementation = self.__dict__["container_spec"]
        k8s = (self.platform_config or {}).get("kubernetes", {})
        spec = self._tether_spec
        inherit: dict[str, Any] = dict(spec.inherit)
        if self._tether_resource:
            inherit["resource"] = dict(self._tether_resource)
        secrets = {**inherit.get("secrets", {}), **_secrets(self, k8s)}
        if secrets:
            inherit["secrets"] = secrets
        selector = dict(k8s.get("nodeSelector", {}).get("labels", {}))
        if selector:
            inherit["node_selector"] = selector
        tolerations = [_toleration_text(t) for t in k8s.get("tolerations", [])]
        if tolerations:
            inherit["tolerations"] = tolerations
        env = {**spec.env, **{k: str(v) for k, v in (stored.env or {}).items()}}
        return LaunchSpec(**{**spec.__dict__, "env": env, "inherit": inherit})

    @property
    def container_spec(self) -> structures.ContainerSpecImplementation | None:
        """The launcher's container, its code carrying the job's settings as they are now."""
        stored: structures.ContainerSpecImplementation | None = self.__dict__.get(
            "container_spec")
        template = self.__dict__.get("_tether_template")
        if stored is None or not template:
            return stored
        before = repr(self._tether_spec.to_json())
        after = repr(self.inherited().to_json())
        stored.command = [part.replace(before, after) for part in template]
        return stored

    @container_spec.setter
    def container_spec(self, value: structures.ContainerSpecImplementation | None) -> None:
        self.__dict__["container_spec"] = value

    # resources are the job's: record them, leave the launcher pod's alone
    def set_cpu_request(self, cpu: Any) -> LauncherTask:
        """Requests CPU for every replica of the job (``2``, ``500m``)."""
        self._tether_resource["cpu"] = cpu_value(_constant(self, "the CPU request", cpu))
        return self

    def set_cpu_limit(self, cpu: Any) -> LauncherTask:
        """Sets the CPU of every replica of the job (``2``, ``500m``)."""
        self._tether_resource["cpu"] = cpu_value(_constant(self, "the CPU limit", cpu))
        return self

    def set_memory_request(self, memory: Any) -> LauncherTask:
        """Requests memory for every replica of the job (``16Gi``)."""
        self._tether_resource["memMB"] = memory_mb(_constant(self, "the memory request",
                                                             memory))
        return self

    def set_memory_limit(self, memory: Any) -> LauncherTask:
        """Sets the memory of every replica of the job (``16Gi``)."""
        self._tether_resource["memMB"] = memory_mb(_constant(self, "the memory limit", memory))
        return self

    def set_accelerator_limit(self, limit: Any) -> LauncherTask:
        """Sets the GPUs of every replica of the job."""
        text = _constant(self, "the accelerator limit", limit)
        try:
            self._tether_resource["gpu"] = int(text)
        except ValueError:
            raise LauncherTaskError(f"task {self.name!r}: accelerator limit {text!r} is not "
                                    "a whole number") from None
        return self

    def set_accelerator_type(self, accelerator: Any) -> LauncherTask:
        """Records the GPU type (the job's scheduler picks nodes by its own settings)."""
        self._tether_resource["accelerator_type"] = _constant(self, "the accelerator type",
                                                              accelerator)
        return self

    def set_gpu_limit(self, gpu: Any) -> LauncherTask:
        """Deprecated KFP name of :meth:`set_accelerator_limit`."""
        return self.set_accelerator_limit(gpu)


def bind(task: PipelineTask, spec: LaunchSpec) -> LauncherTask:
    """Makes a freshly created launcher task pass its settings to the job.

    Args:
        task: The task KFP created for the launcher component.
        spec: The step's spec (as embedded in the component's code).

    Returns:
        The same task, now a :class:`LauncherTask`.
    """
    task.__class__ = LauncherTask
    bound: LauncherTask = task
    bound._tether_bind(spec)
    return bound

