"""A component's typed parameters as KFP step inputs, and a step's declared outputs.

Nothing here imports KFP: the annotations are plain ``typing`` objects KFP understands
(``str``, ``int``, ``float``, ``bool``, ``List[...]``, ``Dict[...]``, ``Optional[...]``), each
with the source text the launcher step's generated code uses.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.runtime.kfp_metrics import ARTIFACT as _METRICS_ARTIFACT

REQUIRED: Any = inspect.Parameter.empty
"""The default of an input that has none."""

RUN_ID_INPUT = "tether_kfp_run_id"
TASK_NAME_INPUT = "tether_kfp_task_name"
TASK_ID_INPUT = "tether_kfp_task_id"
PIPELINE_ROOT_INPUT = "tether_kfp_pipeline_root"
HIDDEN_INPUTS = (RUN_ID_INPUT, TASK_NAME_INPUT, TASK_ID_INPUT, PIPELINE_ROOT_INPUT)
"""Inputs every launcher step has (and native steps whose args use ``${app_id}``); the step
fills them with KFP's run/task placeholders and the pipeline root."""

HANDLE_OUTPUT = "app_handle"
OUTPUTS_OUTPUT = "outputs"
RESERVED_OUTPUTS = (HANDLE_OUTPUT, OUTPUTS_OUTPUT)
"""Outputs every launcher step has: the job's handle and all its outputs as a JSON object."""

METRICS_OUTPUT = _METRICS_ARTIFACT
"""The ``Metrics`` output artifact every launcher step has (and native steps with
``KubernetesOptions(metrics=True)``): the metrics, step and total of the job's last progress
report (:func:`tether.runtime.report`)."""

_SCALAR_TEXT = {str: "str", int: "int", float: "float", bool: "bool"}
OUTPUT_TYPES: dict[str, type] = {
    "str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict,
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def input_placeholder(name: str) -> str:
    """KFP's placeholder for the value of input ``name`` (what a container command holds).

    Args:
        name: The input's name.

    Returns:
        ``{{$.inputs.parameters['name']}}``.
    """
    return "{{$.inputs.parameters['" + name + "']}}"


def output_path_placeholder(name: str) -> str:
    """KFP's placeholder for the local path of output artifact ``name``.

    Args:
        name: The artifact's name.

    Returns:
        ``{{$.outputs.artifacts['name'].path}}``.
    """
    return "{{$.outputs.artifacts['" + name + "'].path}}"


EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
"""KFP's placeholder for the step's executor input as JSON (``dsl`` names it
``PIPELINE_TASK_EXECUTOR_INPUT_PLACEHOLDER``; the KFP backend's launcher and ``kfp.local``
both fill it in, unlike ``{{$.outputs.output_file}}``, which the backend's launcher leaves)."""


@dataclass(frozen=True)
class StepInput:
    """One input of a step: a parameter of the component.

    Attributes:
        name: The parameter's name (also the KFP input's name).
        annotation: The type KFP sees.
        type_text: The same type as Python source.
        default: The default, or :data:`REQUIRED`.
        varargs: Whether it stands for the component's ``*args`` (a list input).
        scalar_str: Whether it is a (possibly optional) ``str``.
        help: The parameter's help text.
        scalar: ``str``, ``int``, ``float`` or ``bool`` for a plain scalar parameter (not a
            list or dict; ``Optional`` only for ``str``): the kinds a native step can take
            from a pipeline value through a KFP input placeholder. Empty otherwise.
        artifact: ``input`` or ``output`` for a ``str`` parameter that is the path/URI of a
            KFP artifact (:mod:`tether.adapters.kfp.artifacts`); empty otherwise.
        artifact_class: The KFP artifact type (``Dataset``, ``Model``...) of an artifact.
    """

    name: str
    annotation: Any
    type_text: str
    default: Any
    varargs: bool
    scalar_str: bool
    help: str
    scalar: str = ""
    artifact: str = ""
    artifact_class: Any = None

    @property
    def required(self) -> bool:
        """Whether a value must be given (an input artifact must always be wired)."""
        return self.default is REQUIRED or self.artifact == "input"

    @property
    def placeholder(self) -> str:
        """What KFP substitutes with this input's value in a container step."""
        if self.artifact:
            side = "inputs" if self.artifact == "input" else "outputs"
            return "{{$." + side + ".artifacts['" + self.name + "'].path}}"
        return input_placeholder(self.name)

    def default_source(self) -> str:
        """The default as a Python literal (for generated code).

        Raises:
            ValueError: When the default has no literal form.
        """
        text = repr(self.default)
        try:
            if ast.literal_eval(text) == self.default:
                return text
        except (ValueError, SyntaxError):
            pass
        raise ValueError(
            f"the default of parameter {self.name!r} ({text}) cannot be written as a Python "
            "literal in a KFP step; give the value explicitly"
        )


def _typing_of(
    base: type, container: str | None, key_type: type, value_list: bool = False
) -> tuple[Any, str]:
    if container == "list":
        return typing.List[base], f"List[{_SCALAR_TEXT[base]}]"  # type: ignore[valid-type]  # noqa: UP006
    if container == "dict" and value_list:  # dict[str, list[str]]
        return (
            typing.Dict[key_type, typing.List[base]],  # type: ignore[valid-type]  # noqa: UP006
            f"Dict[{_SCALAR_TEXT[key_type]}, List[{_SCALAR_TEXT[base]}]]",
        )
    if container == "dict":
        return (
            typing.Dict[key_type, base],  # type: ignore[valid-type]  # noqa: UP006
            f"Dict[{_SCALAR_TEXT[key_type]}, {_SCALAR_TEXT[base]}]",
        )
    return base, _SCALAR_TEXT[base]


def step_inputs(params: Sequence[Any]) -> list[StepInput]:
    """The step inputs of a component's parameters.

    ``*args`` becomes an optional list input of the same name; everything else keeps its
    type, optionality and default.

    Args:
        params: :class:`tether.components.params.Param` objects.

    Returns:
        The inputs, in signature order.

    Raises:
        ValueError: When a parameter name clashes with the step's own inputs.
    """
    out: list[StepInput] = []
    for p in params:
        if p.name in HIDDEN_INPUTS or p.name == METRICS_OUTPUT:
            raise ValueError(
                f"parameter {p.name!r} clashes with an input KFP steps reserve for themselves "
                f"({', '.join((*HIDDEN_INPUTS, METRICS_OUTPUT))}); rename it"
            )
        if p.kind == "varargs":
            annotation, text = _typing_of(p.base, "list", str)
            out.append(StepInput(
                name=p.name, annotation=typing.Optional[annotation],  # noqa: UP045
                type_text=f"Optional[{text}]", default=None, varargs=True, scalar_str=False,
                help=p.help or f"The component's positional arguments (*{p.name}).",
            ))
            continue
        annotation, text = _typing_of(p.base, p.container, p.key_type,
                                      getattr(p, "value_list", False))
        if p.optional:
            annotation, text = typing.Optional[annotation], f"Optional[{text}]"  # noqa: UP045
        scalar = ""
        if p.container is None and (p.base is str or not p.optional):
            scalar = _SCALAR_TEXT[p.base]
        out.append(StepInput(
            name=p.name, annotation=annotation, type_text=text, default=p.default,
            varargs=False, scalar_str=p.base is str and p.container is None, help=p.help,
            scalar=scalar,
        ))
    return out


def parse_outputs(outputs: Mapping[str, Any] | Sequence[str] | None) -> list[tuple[str, str]]:
    """Checks the outputs a step declares.

    Args:
        outputs: Names (typed ``str``), or names mapped to ``str``, ``int``, ``float``,
            ``bool``, ``list`` or ``dict`` (the types or their names).

    Returns:
        ``(name, type name)`` pairs, in the given order.

    Raises:
        ValueError: For a name that is not an identifier, reserved, repeated, or an
            unsupported type.
    """
    if outputs is None:
        return []
    if isinstance(outputs, str):
        raise ValueError(
            f"outputs={outputs!r}: give a list of names or a dict of name -> type, not a string"
        )
    items: list[tuple[str, Any]] = (
        list(outputs.items()) if isinstance(outputs, Mapping) else [(n, str) for n in outputs]
    )
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for name, typ in items:
        if not isinstance(name, str) or not _IDENT.match(name) or keyword.iskeyword(name):
            raise ValueError(
                f"output name {name!r} is not allowed: KFP output names must be Python "
                "identifiers (letters, digits, _)"
            )
        if name in RESERVED_OUTPUTS or name == METRICS_OUTPUT:
            raise ValueError(
                f"output name {name!r} is reserved: every launcher step has the outputs "
                f"{', '.join((*RESERVED_OUTPUTS, METRICS_OUTPUT))}"
            )
        if name in seen:
            raise ValueError(f"output {name!r} is declared twice")
        seen.add(name)
        tname = typ if isinstance(typ, str) else getattr(typ, "__name__", repr(typ))
        if tname not in OUTPUT_TYPES:
            raise ValueError(
                f"output {name!r} has type {tname!r}; allowed: {', '.join(OUTPUT_TYPES)}"
            )
        out.append((name, tname))
    return out


def step_identifier(component_name: str) -> str:
    """A Python identifier naming the step (KFP turns it into the component/task name).

    Args:
        component_name: ``utils.echo``, ``pkg.mod:fn``, ``path/file.py:fn``...

    Returns:
        E.g. ``utils_echo`` or ``fn``.
    """
    base = component_name.rsplit(":", 1)[-1] if ":" in component_name else component_name
    ident = re.sub(r"\W+", "_", base).strip("_") or "step"
    if ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"step_{ident}"
    return ident
