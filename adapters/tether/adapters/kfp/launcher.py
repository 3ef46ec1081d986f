"""Launcher steps: a lightweight Python component that runs tether in the step.

The component's function is generated: its parameters are the component's typed parameters
(so they can be wired to pipeline parameters and upstream outputs) plus the KFP run/task ids,
its return value the job's outputs, an output artifact ``tether_metrics`` (``Metrics``, the
job's last progress report), and its body one call to
:func:`tether.adapters.kfp.launch.run_step` with the step's :class:`LaunchSpec`. KFP ships the
function's source in the pipeline, so the step needs only an image with tether installed
(:class:`~tether.adapters.kfp.options.LauncherOptions`). Because it is a lightweight
component, ``kfp.local.SubprocessRunner`` runs it too.
"""

from __future__ import annotations

import hashlib
import linecache
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.adapters.kfp.options import LauncherOptions
from tether.adapters.kfp.signature import (
    HIDDEN_INPUTS,
    METRICS_OUTPUT,
    RESERVED_OUTPUTS,
    StepInput,
)
from tether.adapters.kfp.spec import LaunchSpec

if TYPE_CHECKING:
    from kfp.dsl.base_component import BaseComponent

_RESERVED_FUNCTION_NAMES = frozenset({"kfp", "dsl", "typing", "NamedTuple", "List", "Dict",
                                      "Optional", "Any"})


def _docstring(description: str, inputs: Sequence[StepInput]) -> str:
    lines = [description.strip() or "Runs a tether component as a KFP step."]
    documented = [i for i in inputs if i.help]
    if documented:
        lines += ["", "Args:"]
        lines += [f"    {i.name}: {' '.join(i.help.split())}" for i in documented]
    return "\n".join(lines) + "\n"


def _type_source(inp: StepInput) -> str:
    if not inp.artifact:
        return inp.type_text
    import kfp.dsl

    name = str(getattr(inp.artifact_class, "__name__", inp.artifact_class))
    if getattr(kfp.dsl, name, None) is not inp.artifact_class:
        raise ValueError(
            f"artifact parameter {inp.name!r} has type {name}; a launcher step takes "
            "the artifact types of kfp.dsl (Artifact, Dataset, Model, Metrics...)")
    return f"{'Input' if inp.artifact == 'input' else 'Output'}[{name}]"


def launcher_source(
    func_name: str,
    inputs: Sequence[StepInput],
    spec: LaunchSpec,
    description: str = "",
) -> str:
    """The Python source of a launcher step's function.

    Args:
        func_name: The function's name (an identifier; KFP derives the step's name from it).
        inputs: The component's inputs.
        spec: The step's fixed part, embedded as a JSON string literal.
        description: The component's description (the step's docstring).

    Returns:
        The source of one ``def``.
    """
    if func_name in _RESERVED_FUNCTION_NAMES:
        func_name = f"tether_{func_name}"
    first = [i for i in inputs if i.required or i.artifact]
    params = [f"{i.name}: {_type_source(i)}" for i in first]
    params.append(f"{METRICS_OUTPUT}: Output[Metrics]")  # no default: before those with one
    params += [f"{i.name}: {_type_source(i)} = {i.default_source()}"
               for i in inputs if i not in first]
    params += [f"{h}: str = ''" for h in HIDDEN_INPUTS]
    fields = [f"({n!r}, str)" for n in RESERVED_OUTPUTS]
    fields += [f"({n!r}, {t})" for n, t in spec.outputs]
    args_dict = "{" + ", ".join(f"{i.name!r}: {i.name}" for i in inputs) + "}"
    hidden = ", ".join(HIDDEN_INPUTS)
    return (
        f"def {func_name}(\n"
        + "".join(f"    {p},\n" for p in params)
        + f") -> NamedTuple('Outputs', [{', '.join(fields)}]):\n"
        f"    {_docstring(description, inputs)!r}\n"
        "    import tether.adapters.kfp.launch as _tether_launch\n"
        "    return _tether_launch.run_step(\n"
        f"        {spec.to_json()!r},\n"
        f"        {args_dict},\n"
        f"        {hidden},\n"
        f"        metrics={METRICS_OUTPUT},\n"
        "    )\n"
    )


def _define(source: str, func_name: str) -> Callable[..., Any]:
    """Defines the function so that ``inspect.getsource`` (which KFP uses) finds its source."""
    filename = f"<tether-kfp-step-{hashlib.sha256(source.encode()).hexdigest()[:16]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {
        "NamedTuple": typing.NamedTuple, "List": typing.List, "Dict": typing.Dict,  # noqa: UP006
        "Optional": typing.Optional, "__name__": "tether_kfp_generated",
    }
    import kfp.dsl  # every launcher step has an output artifact (its Metrics)

    namespace.update({n: getattr(kfp.dsl, n) for n in dir(kfp.dsl) if n[:1].isupper()})
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102 - our own generated code
    fn: Callable[..., Any] = namespace[func_name]
    return fn


def build_launcher_component(
    func_name: str,
    inputs: Sequence[StepInput],
    spec: LaunchSpec,
    options: LauncherOptions,
    description: str = "",
) -> BaseComponent:
    """Builds a launcher step's KFP component.

    Args:
        func_name: The step's identifier.
        inputs: The component's inputs.
        spec: The step's fixed part.
        options: Image and installs of the step.
        description: The component's description.

    Returns:
        A lightweight Python component.
    """
    from kfp.dsl import component_factory

    source = launcher_source(func_name, inputs, spec, description)
    name = func_name if func_name not in _RESERVED_FUNCTION_NAMES else f"tether_{func_name}"
    fn = _define(source, name)
    return component_factory.create_component_from_func(
        fn,
        base_image=options.resolved_image(),
        packages_to_install=list(options.packages_to_install) or None,
        pip_index_urls=options.pip_index_urls,
        install_kfp_package=options.install_kfp_package,
    )
