"""Native steps: a single-replica role as a KFP container component, pod settings included.

The role's image, entrypoint and args become the container; env, CPU, memory, GPUs and
retries become task settings; volume mounts, node selectors (from named resources),
tolerations and a memory-backed ``/dev/shm`` are set through ``kfp-kubernetes``. Macros map
to KFP: ``${app_id}`` becomes ``<run id>-<task id>`` (through the step's hidden inputs),
``${replica_id}`` becomes ``0``, ``${img_root}`` the image's root (empty).

Pipeline values reach the container as KFP input placeholders (``str``, ``int``, ``float``
and ``bool`` parameters the component passes into its command; see
:mod:`tether.adapters.kfp.probe` and :func:`runtime_problems`).

With ``KubernetesOptions(metrics=True)`` the step has the ``Metrics`` output artifact
``tether_metrics`` and its command becomes ``env TETHER_KFP_EXECUTOR_INPUT={{$}}
TETHER_KFP_METRICS_PATH=<the artifact's path> <entrypoint> <args>``: KFP fills both in and
the job's :func:`tether.runtime.report` writes the artifact (:mod:`tether.runtime.kfp_metrics`);
``env`` execs the entrypoint, so the job's argv, PID and signals are as without it.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.adapters.kfp.options import KubernetesOptions
from tether.adapters.kfp.signature import (
    EXECUTOR_INPUT_PLACEHOLDER,
    METRICS_OUTPUT,
    RUN_ID_INPUT,
    TASK_ID_INPUT,
    StepInput,
    input_placeholder,
    output_path_placeholder,
)
from tether.errors import SpecError
from tether.runtime.kfp_metrics import ENV_EXECUTOR_INPUT, ENV_METRICS_PATH
from tether.specs import AppDef, BindMount, DeviceMount, Role, VolumeMount, macros

if TYPE_CHECKING:
    from kfp.dsl.base_component import BaseComponent
    from kfp.dsl.pipeline_task import PipelineTask

APP_ID_VALUE = f"{input_placeholder(RUN_ID_INPUT)}-{input_placeholder(TASK_ID_INPUT)}"
"""What ``${app_id}`` becomes in a native step's args."""

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
_INTERPRETERS = re.compile(r"^(python[0-9.]*|perl|ruby)$")
_ANY_INPUT = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


class NativeStepError(SpecError):
    """A role cannot run as a native KFP step; the message names the role and the field."""


def topology_problems(app: AppDef) -> list[str]:
    """Why the app is not one role of one replica (empty when it is).

    Args:
        app: The app.

    Returns:
        The problems.
    """
    if len(app.roles) != 1:
        names = ", ".join(r.name for r in app.roles) or "none"
        return [f"app {app.name!r} has {len(app.roles)} roles ({names}); a native step runs one"]
    role = app.roles[0]
    if role.num_replicas != 1:
        return [
            f"role {role.name!r}: num_replicas={role.num_replicas}; a native step runs one replica"
        ]
    return []


def role_problems(role: Role, metrics: bool = False) -> list[str]:
    """What of a role a KFP container step cannot express.

    Args:
        role: The role.
        metrics: The step has the ``Metrics`` artifact (see :func:`metrics_problems`).

    Returns:
        One message per field, naming the role and the field.
    """
    where = f"role {role.name!r}"
    out: list[str] = []
    if not role.image:
        out.append(f"{where}: image is empty; a native step needs a container image (image=...)")
    if role.workspace is not None:
        out.append(f"{where}: workspace={role.workspace!r}; a native step runs a prebuilt "
                   "image and cannot build a workspace into it")
    if role.min_replicas not in (None, 1):
        out.append(f"{where}: min_replicas={role.min_replicas}; native steps are not elastic")
    for i, m in enumerate(role.mounts):
        if isinstance(m, BindMount):
            out.append(f"{where}: mounts[{i}] binds host path {m.src_path!r}; KFP cannot mount "
                       "host paths (use a volume mount of a PVC)")
        elif isinstance(m, DeviceMount):
            out.append(f"{where}: mounts[{i}] is device {m.src_path!r}; KFP cannot mount devices")
        elif isinstance(m, VolumeMount) and m.read_only:
            out.append(f"{where}: mounts[{i}] mounts volume {m.src!r} read-only; kfp-kubernetes "
                       "mounts PVCs read-write only")
    if role.resource.devices:
        out.append(f"{where}: resource.devices={dict(role.resource.devices)}; a KFP task "
                   "requests one accelerator type only (GPUs)")
    for k, ref in role.secrets.items():
        if not ref.key:
            out.append(f"{where}: secrets[{k!r}] = {ref} names no key; a Kubernetes secret "
                       "env var takes one key of the Secret")
    for k, v in role.env.items():
        if macros.app_id in v:
            out.append(f"{where}: env {k} uses {macros.app_id}; KFP cannot fill run-time "
                       "values into environment variables (pass it in args)")
    return out + (metrics_problems(role) if metrics else [])


def metrics_problems(role: Role) -> list[str]:
    """Why the role's command cannot run through ``env`` (``KubernetesOptions(metrics=True)``).

    Args:
        role: The role.

    Returns:
        The problems.
    """
    where = f"role {role.name!r}"
    if not role.entrypoint:
        return [f"{where}: entrypoint is empty; KubernetesOptions(metrics=True) runs the "
                "command through `env`, which needs the role's entrypoint (the image's own "
                "ENTRYPOINT cannot be wrapped)"]
    if "=" in role.entrypoint or role.entrypoint.startswith("-"):
        return [f"{where}: entrypoint={role.entrypoint!r}; `env` would read it as a variable "
                "or an option (KubernetesOptions(metrics=True))"]
    return []


def metrics_command(entrypoint: str) -> list[str]:
    """The command of a step with the ``Metrics`` artifact: ``env`` hands the job its location.

    Args:
        entrypoint: The role's entrypoint.

    Returns:
        The command (the role's args follow it).
    """
    return ["env", f"{ENV_EXECUTOR_INPUT}={EXECUTOR_INPUT_PLACEHOLDER}",
            f"{ENV_METRICS_PATH}={output_path_placeholder(METRICS_OUTPUT)}", entrypoint]


def substitute_macros(role: Role) -> Role:
    """The role with macros replaced by what they are in a KFP step.

    Args:
        role: The role (not modified).

    Returns:
        A copy.
    """
    return macros.Values(img_root="", app_id=APP_ID_VALUE, replica_id="0").apply(role)


def _interpreter_script_index(role: Role) -> int | None:
    """Index in args of the script of ``sh -c SCRIPT`` / ``python -c CODE``, if any."""
    prog = os.path.basename(role.entrypoint)
    if prog not in _SHELLS and not _INTERPRETERS.match(prog):
        return None
    for i, a in enumerate(role.args):
        if a == "-c" or (prog in _SHELLS and re.fullmatch(r"-[a-zA-Z]*c[a-zA-Z]*", a)):
            return i + 1 if i + 1 < len(role.args) else None
        if not a.startswith("-"):
            return None
    return None


def runtime_problems(role: Role, runtime: Sequence[StepInput]) -> list[str]:
    """Why pipeline values of ``runtime`` inputs cannot reach the container as placeholders.

    Where each value goes is found by :func:`tether.adapters.kfp.probe.probe`; what is left
    is quoting: a ``str`` value may not be spliced into a shell or interpreter script
    (``sh -c``, ``python -c``), since KFP substitutes it unquoted and only a launcher step
    hands the component the real value to quote. (Numbers and booleans are safe there: KFP
    checks their type.)

    Args:
        role: The role, macros substituted, with placeholders for the runtime inputs.
        runtime: The inputs wired to pipeline values.

    Returns:
        The problems.
    """
    out: list[str] = []
    script_at = _interpreter_script_index(role)
    if script_at is None:
        return out
    for inp in runtime:
        ph = inp.placeholder
        script = role.args[script_at]
        if inp.scalar == "str" and not inp.artifact and ph in script and script != ph:
            out.append(f"parameter {inp.name!r} is wired to a pipeline value, but the "
                       "component splices it into the script of "
                       f"'{os.path.basename(role.entrypoint)} -c'; KFP would substitute it "
                       "unquoted")
    return out


def _container_fn(
    func_name: str,
    description: str,
    inputs: Sequence[StepInput],
    hidden: Sequence[str],
    role: Role,
    metrics: bool = False,
) -> Any:
    from kfp import dsl

    if metrics:
        command: list[str] | None = metrics_command(role.entrypoint)
    else:
        command = [role.entrypoint] if role.entrypoint else None

    def container(*_placeholders: Any) -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=role.image, command=command, args=list(role.args) or None)

    from tether.adapters.kfp.artifacts import annotation_of

    first = [i for i in inputs if i.required or i.artifact]
    params = [
        inspect.Parameter(i.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=annotation_of(i))
        for i in first
    ]
    if metrics:  # no default: before the inputs that have one
        params.append(inspect.Parameter(METRICS_OUTPUT, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=dsl.Output[dsl.Metrics]))
    params += [
        inspect.Parameter(i.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=annotation_of(i), default=i.default)
        for i in inputs if i not in first
    ]
    params += [inspect.Parameter(h, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str,
                                 default="") for h in hidden]
    container.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    container.__name__ = container.__qualname__ = func_name
    documented = [i for i in inputs if i.help]
    doc = description.strip() or "Runs a tether component as a KFP container step."
    if documented:
        doc += "\n\nArgs:\n" + "\n".join(f"    {i.name}: {' '.join(i.help.split())}"
                                         for i in documented)
    container.__doc__ = doc
    return container


def build_native_component(
    func_name: str,
    description: str,
    inputs: Sequence[StepInput],
    role: Role,
    interfaces: dict[tuple[Any, ...], Any] | None = None,
    metrics: bool = False,
) -> tuple[BaseComponent, list[str]]:
    """Builds the container component of a native step.

    What KFP reads from the component function's signature and docstring (its interface:
    name, description, inputs) is the same for every call of one step with the same hidden
    inputs; only the container (the role's command, constants spliced in) differs. Given
    ``interfaces``, the interface is read once per hidden-input set and each call only adds
    its container, which is what ``create_container_component_from_func`` does after
    reading it.

    Args:
        func_name: The step's identifier.
        description: The component's description.
        inputs: The component's inputs.
        role: The role, macros substituted (:func:`substitute_macros`).
        interfaces: The step's interfaces read so far, by hidden inputs (kept by the step).
        metrics: Give the step the ``Metrics`` output artifact and run its command through
            ``env`` (:func:`metrics_command`; check :func:`metrics_problems` first).

    Returns:
        The component, and the hidden inputs the task must fill (the run/task ids when
        ``${app_id}`` is used).
    """
    import dataclasses

    from kfp.dsl import component_factory, structures
    from kfp.dsl.container_component_class import ContainerComponent
    from kfp.pipeline_spec import pipeline_spec_pb2

    used = set(_ANY_INPUT.findall(" ".join([role.entrypoint, *role.args])))
    hidden = [h for h in (RUN_ID_INPUT, TASK_ID_INPUT) if h in used]
    fn = _container_fn(func_name, description, inputs, hidden, role, metrics)
    if interfaces is None:
        return component_factory.create_container_component_from_func(fn), hidden
    key = (*hidden, metrics)
    interface = interfaces.get(key)
    if interface is None:
        interface = component_factory.extract_component_interface(fn, containerized=True)
        interfaces[key] = interface
    container = structures.ContainerSpecImplementation.from_container_spec(fn())
    spec = dataclasses.replace(  # validates the placeholders against the inputs, as KFP does
        interface, implementation=structures.Implementation(container),
        platform_spec=pipeline_spec_pb2.PlatformSpec(),
    )
    return ContainerComponent(spec, fn), hidden


def _cpu_text(cpu: float) -> str:
    text = format(cpu, "g")
    if re.fullmatch(r"([0-9]*[.])?[0-9]+", text):
        return text
    return f"{max(1, round(cpu * 1000))}m"


def _set_resources(task: PipelineTask, cpu: Any, memory: str | None) -> None:
    """Sets the task's CPU and memory, each request equal to its limit.

    KFP's ``set_cpu_request`` and the three others each call ``inspect.stack()`` (to name the
    caller in an error), which reads the source of every frame of the stack: four of them
    cost more than all else a native step adds to a pipeline. A task whose container spec is
    still to be compiled gets its resource spec set at once, with the text ``_cpu_text`` and
    ``{memMB}Mi`` always have; a pipeline value (cpu from a parameter), or a task
    ``kfp.local`` runs as it is added, goes through KFP's setters as before.
    """
    from kfp.dsl import pipeline_task, structures

    spec = getattr(task, "container_spec", None)
    if (spec is None or task.state is not pipeline_task.TaskState.FUTURE
            or (cpu is not None and not isinstance(cpu, str))):
        if cpu is not None:
            task.set_cpu_request(cpu).set_cpu_limit(cpu)
        if memory is not None:
            task.set_memory_request(memory).set_memory_limit(memory)
        return
    if cpu is None and memory is None:
        return
    res = spec.resources or structures.ResourceSpec()
    if cpu is not None:
        res.cpu_request = res.cpu_limit = cpu
    if memory is not None:
        res.memory_request = res.memory_limit = memory
    spec.resources = res


def apply_task_settings(task: PipelineTask, role: Role, options: KubernetesOptions,
                        from_values: Mapping[str, Any] | None = None) -> None:
    """Applies the role's env, secrets, resources, retries and pod settings to a native task.

    Args:
        task: The task.
        role: The role, macros substituted.
        options: Pod settings.
        from_values: ``gpu`` / ``cpu`` set from pipeline values (KFP fills them in).
    """
    from_values = from_values or {}
    from kfp import kubernetes

    for k, v in sorted(role.env.items()):
        task.set_env_variable(k, v)
    for env_name, ref in sorted(role.secrets.items()):  # a reference, never the value
        kubernetes.use_secret_as_env(task, secret_name=ref.name,
                                     secret_key_to_env={ref.key: env_name})
    res = role.resource
    cpu = from_values.get("cpu")
    if cpu is None and res.cpu is not None and res.cpu > 0:
        cpu = _cpu_text(res.cpu)
    memory = f"{res.memMB}Mi" if res.memMB is not None and res.memMB > 0 else None
    _set_resources(task, cpu, memory)
    gpus = "gpu" in from_values or (res.gpu is not None and res.gpu > 0)
    if gpus:
        task.set_accelerator_type(options.accelerator_type).set_accelerator_limit(
            from_values.get("gpu", res.gpu))
    if role.max_retries > 0:
        task.set_retry(num_retries=role.max_retries)
    for i, m in enumerate(role.mounts):
        if isinstance(m, VolumeMount):
            kubernetes.mount_pvc(task, pvc_name=m.src, mount_path=m.dst_path)
        else:  # role_problems() rejected the rest already
            raise NativeStepError(f"role {role.name!r}: mounts[{i}] {m!r} is not supported")
    selectors = {str(k): str(v) for k, v in res.capabilities.items()}
    selectors.update(options.node_selector)
    for k, v in sorted(selectors.items()):
        kubernetes.add_node_selector(task, label_key=k, label_value=v)
    if options.gpu_toleration and gpus:
        kubernetes.add_toleration(task, key=options.accelerator_type, operator="Exists",
                                  effect="NoSchedule")
    for tol in options.tolerations:
        kubernetes.add_toleration(task, **tol)
    if options.shm and not any(m.dst_path == "/dev/shm" for m in role.mounts):
        kubernetes.empty_dir_mount(task, volume_name="dshm", mount_path="/dev/shm",
                                   medium="Memory", size_limit=options.shm_size)
    if options.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(options.image_pull_secrets))
