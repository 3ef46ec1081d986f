"""A tether step as a KFP component object: ``component_spec``, YAML, sub-pipelines.

:meth:`TetherStep.as_component` wraps one call of the step, with every parameter not fixed
by the caller as an input and the step's declared outputs, output artifacts and, when its task
has it, the ``Metrics`` artifact ``tether_metrics`` (every launcher step; a native step with
``KubernetesOptions(metrics=True)``) as outputs, in a KFP graph component (a one-step
pipeline). It is a real
KFP component: it has a ``component_spec``, compiles to YAML that
``kfp.components.load_component_from_text`` loads back, and can be called inside another
pipeline like any component. Unlike a bare container or Python component it keeps what a
step adds to its task: resources, GPUs, retries, caching, pod settings, and the settings
a launcher step passes to its job (:mod:`tether.adapters.kfp.inherit`).

Parameters the component needs as constants (an ``image``, a parameter that decides the
number of replicas) are fixed with keyword arguments: ``step.as_component(image="...")``.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tether.adapters.kfp.signature import METRICS_OUTPUT, StepInput

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent


class ComponentPlan(Protocol):
    """What is read of the plan of the step's call (``StepPlan`` has it)."""

    @property
    def metrics(self) -> bool: ...


class ComponentStep(Protocol):
    """What wrapping a step as a component reads of it (``TetherStep`` has all of it; this
    module sits below the step module and never imports it)."""

    @property
    def name(self) -> str: ...

    @property
    def component_name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def inputs(self) -> Sequence[StepInput]: ...

    @property
    def outputs(self) -> Sequence[tuple[str, str]]: ...

    def plan_open(self, fixed: Mapping[str, Any], names: Sequence[str]) -> ComponentPlan: ...

    def __call__(self, **kwargs: Any) -> Any: ...


def as_component(step: ComponentStep, name: str | None = None, **fixed: Any) -> GraphComponent:
    """The step as a KFP component whose inputs are the parameters not in ``fixed``.

    Args:
        step: The step.
        name: The component's name (default: ``tether-`` and the step's name; it must differ
            from the step's, or KFP loads the YAML back as the bare inner component).
        **fixed: Constants for some of the component's parameters.

    Returns:
        The component.

    Raises:
        StepArgumentError: For a fixed name the component does not take, or arguments the
            step's call refuses.
        NativeStepError: When that call must be native but cannot be.
    """
    from kfp import dsl

    from tether.adapters.kfp.artifacts import annotation_of

    # output artifacts are the task's outputs, not inputs of the component
    open_inputs = [i for i in step.inputs if i.name not in fixed and i.artifact != "output"]
    ordered = [i for i in open_inputs if i.required] + [i for i in open_inputs if not i.required]
    params = [
        inspect.Parameter(i.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=annotation_of(i),
                          default=inspect.Parameter.empty if i.required else i.default)
        for i in ordered
    ]

    # the outputs are declared before KFP calls the body: the call's plan says which it
    # has (and checks the fixed names first)
    metrics = step.plan_open(fixed, [p.name for p in params]).metrics
    outputs = _outputs(step, metrics)
    returns: Any = NamedTuple("Outputs", outputs) if outputs else None

    def body(*args: Any, **kwargs: Any) -> Any:
        bound = dict(zip([p.name for p in params], args, strict=False))
        bound.update(kwargs)
        task = step(**fixed, **bound)
        if (METRICS_OUTPUT in task.outputs) != metrics:  # plan_open is the call's plan
            raise AssertionError(f"step {step.name!r}: its task's {METRICS_OUTPUT} output "
                                 "differs from its plan's")
        if returns is None:
            return None
        return returns(**{name: task.outputs[name] for name, _ in outputs})

    body.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    body.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
    body.__name__ = body.__qualname__ = step.name
    body.__doc__ = step.description or f"The tether component {step.component_name}."
    pipeline_name = name or f"tether-{step.name.replace('_', '-')}"
    return dsl.pipeline(name=pipeline_name, description=body.__doc__)(body)


def _outputs(step: ComponentStep, metrics: bool) -> list[tuple[str, Any]]:
    """The component's outputs: the step's declared outputs, output artifacts and, with
    ``metrics``, its ``Metrics`` artifact."""
    from kfp.dsl import Metrics

    from tether.adapters.kfp.signature import OUTPUT_TYPES

    out: list[tuple[str, Any]] = [(n, OUTPUT_TYPES[t]) for n, t in step.outputs]
    out += [(i.name, i.artifact_class) for i in step.inputs if i.artifact == "output"]
    if metrics:
        out.append((METRICS_OUTPUT, Metrics))
    return out


def component_yaml(component: GraphComponent) -> str:
    """The component as KFP YAML (what ``load_component_from_text`` reads).

    Args:
        component: A component from :func:`as_component`.

    Returns:
        The YAML text.
    """
    from kfp import compiler

    with tempfile.TemporaryDirectory(prefix="tether-kfp-component-") as tmp:
        path = os.path.join(tmp, "component.yaml")
        compiler.Compiler().compile(component, path)
        with open(path, encoding="utf-8") as f:
            return f.read()
