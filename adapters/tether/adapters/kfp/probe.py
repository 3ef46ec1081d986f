"""Pipeline values in native steps: render the component with stand-in values, map them back.

A native step's command is fixed when the pipeline is compiled, so a pipeline value (a
pipeline parameter or an upstream output) can reach it only as a KFP input placeholder
(``{{$.inputs.parameters['epochs']}}``; an artifact's path for artifact parameters), which KFP
substitutes when the step runs. To find
where each value goes, the component is rendered once with a distinctive stand-in value per
parameter (an ``int`` like ``73400017``, a ``float`` like ``7340017.25``, ``True``, or the
placeholder itself for a ``str``), and once more per parameter with another stand-in for that
parameter only. The two renders must differ only in the entrypoint or args, where the first
stand-in's text appears exactly where the second's does; that text becomes the placeholder.

Anything else means the job depends on the value in a way KFP cannot substitute: the number
of roles or replicas (the *shape*), resources, env, the image, or a value the component
computes from the parameter (``str(epochs * 2)``). Those steps need a launcher step, which
builds the job with the real value; :class:`Probe` says which parameter and which field.

KFP renders a value as text: ``int`` as ``5``, ``float`` as ``0.1``, ``bool`` as ``true`` /
``false`` (JSON, not Python's ``True``).

Nothing here imports KFP.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.adapters.kfp.signature import StepInput
from tether.specs import AppDef

Build = Callable[[Mapping[str, Any]], AppDef]
"""Builds the AppDef from the component's arguments."""

_SHAPE_FIELDS = frozenset({"roles", "num_replicas", "min_replicas"})
_RESOURCE_PATHS = frozenset({"roles[0].resource.gpu", "roles[0].resource.cpu"})
_INT_BASE, _INT_ALT = 73_400_017, 91_800_029
_FLOAT_BASE, _FLOAT_ALT = 7_340_017.25, 9_180_029.125
_STR_ALT = "tether-kfp-probe-"


@dataclass
class Problem:
    """Why one pipeline value cannot reach a native step.

    Attributes:
        param: The parameter.
        message: What depends on it (names the field).
        shape: Whether the number of roles or replicas depends on it.
    """

    param: str
    message: str
    shape: bool = False


@dataclass
class Probe:
    """The result of rendering a component with stand-ins for its pipeline values.

    Attributes:
        app: The AppDef with KFP input placeholders where the values go (None when a value
            cannot be mapped).
        problems: One per parameter that cannot be mapped.
        build_error: Set when the component cannot be built with stand-ins at all.
        resources: Resource fields that are a parameter's value as it is (``gpu`` or ``cpu``
            -> parameter): KFP takes them from the pipeline value (``set_accelerator_limit``,
            ``set_cpu_limit``). In :attr:`app` they are 0.
    """

    app: AppDef | None
    problems: list[Problem] = field(default_factory=list)
    build_error: str = ""
    resources: dict[str, str] = field(default_factory=dict)


def stand_in(inp: StepInput, index: int, alt: bool = False) -> Any:
    """The stand-in value of a parameter in a probe render.

    Args:
        inp: The parameter (a scalar, :attr:`StepInput.scalar` set).
        index: Its position among the pipeline values (stand-ins must differ).
        alt: The second stand-in instead of the first.

    Returns:
        The value.
    """
    if inp.scalar == "int":
        return (_INT_ALT if alt else _INT_BASE) + 1000 * index
    if inp.scalar == "float":
        return (_FLOAT_ALT if alt else _FLOAT_BASE) + 1000 * index
    if inp.scalar == "bool":
        return not alt
    return f"{_STR_ALT}{index}-{inp.name}" if alt else inp.placeholder


def _texts(base: Any, alt: Any) -> list[tuple[str, str]]:
    """How the two stand-ins may be spelled in the command (bool: ``True`` or ``true``)."""
    if isinstance(base, bool):
        return [(str(base), str(alt)), (str(base).lower(), str(alt).lower())]
    return [(base if isinstance(base, str) else str(base), alt if isinstance(alt, str)
             else str(alt))]


def _diff(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    """The leaves where two renders differ, as (path, value in a, value in b)."""
    if type(a) is not type(b):
        return [(path, a, b)]
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        out: list[tuple[str, Any, Any]] = []
        for f in dataclasses.fields(a):
            out += _diff(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}".lstrip("."))
        return out
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [(path, a, b)]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _diff(x, y, f"{path}[{i}]")
        return out
    if isinstance(a, Mapping):
        if set(a) != set(b):
            return [(path, a, b)]
        out = []
        for k in a:
            out += _diff(a[k], b[k], f"{path}[{k!r}]")
        return out
    if isinstance(a, enum.Enum) or a != b:
        return [] if a == b else [(path, a, b)]
    return []


def _field_name(path: str) -> str:
    """``roles[0].resource.gpu`` -> ``gpu``; ``roles`` -> ``roles``."""
    last = path.rsplit(".", 1)[-1]
    return last.split("[", 1)[0]


def _templatable(path: str) -> bool:
    tail = path.split(".", 1)[1] if "." in path else ""
    return path.startswith("roles[") and (tail == "entrypoint" or tail.startswith("args["))


def _where(app: AppDef, path: str) -> str:
    if path.startswith("roles[") and "]" in path:
        idx = int(path[len("roles["):path.index("]")])
        if idx < len(app.roles):
            rest = path[path.index("]") + 1:].lstrip(".")
            return f"role {app.roles[idx].name!r} {rest}".rstrip()
    return path


def _set(app: AppDef, path: str, value: str) -> None:
    role = app.roles[int(path[len("roles["):path.index("]")])]
    tail = path.split(".", 1)[1]
    if tail == "entrypoint":
        role.entrypoint = value
    else:
        role.args[int(tail[len("args["):-1])] = value


def probe(build: Build, inputs: Sequence[StepInput], constants: Mapping[str, Any],
          runtime: Sequence[str]) -> Probe:
    """Renders the component with stand-ins for its pipeline values and maps them back.

    Args:
        build: Builds the AppDef from arguments.
        inputs: The runtime parameters' inputs, in the order of ``runtime``.
        constants: The arguments that are constants.
        runtime: The parameters wired to pipeline values.

    Returns:
        The probe: the AppDef with placeholders, or why it cannot have them.
    """
    by_name = {i.name: i for i in inputs}
    problems = [
        Problem(n, f"parameter {n!r} has type {by_name[n].type_text}; a native step takes "
                   "pipeline values only for str, int, float and bool parameters")
        for n in runtime if not by_name[n].scalar or by_name[n].varargs
    ]
    if problems:
        return Probe(None, problems)
    base = {n: stand_in(by_name[n], i) for i, n in enumerate(runtime)}
    try:
        app = build({**constants, **base})
    except (ValueError, TypeError, KeyError) as e:
        return Probe(None, build_error=(
            "the component cannot build its job before the pipeline runs with the pipeline "
            f"values of {', '.join(runtime)}: {e}"))
    templates: dict[str, str] = {}
    resources: dict[str, str] = {}
    for i, name in enumerate(runtime):
        inp = by_name[name]
        alt = stand_in(inp, i, alt=True)
        try:
            other = build({**constants, **base, name: alt})
        except (ValueError, TypeError, KeyError) as e:
            problems.append(Problem(name, f"parameter {name!r}: the component accepts only some "
                                          f"values of it when it builds the job ({e})"))
            continue
        problem: Problem | None = None
        for base_text, alt_text in _texts(base[name], alt):
            attempt, bound = dict(templates), dict(resources)
            problem = _map_param(app, other, inp, (base[name], alt), base_text, alt_text,
                                 attempt, bound)
            if problem is None:
                templates, resources = attempt, bound
                break
        if problem is not None:
            problems.append(problem)
    if problems:
        return Probe(None, problems)
    for path, text in templates.items():
        _set(app, path, text)
    if resources:
        res = app.roles[0].resource
        app.roles[0].resource = dataclasses.replace(
            res, cpu=0 if "cpu" in resources else res.cpu, gpu=0 if "gpu" in resources else res.gpu)
    return Probe(app, resources=resources)


def _map_param(app: AppDef, other: AppDef, inp: StepInput, values: tuple[Any, Any],
               base_text: str, alt_text: str, templates: dict[str, str],
               resources: dict[str, str]) -> Problem | None:
    """Maps one parameter's stand-in to its placeholder, recording it in ``templates``.

    ``other`` differs from ``app`` in this parameter only, so every difference must be the
    stand-in's text in an entrypoint or argument, exactly where the other stand-in's is, or
    the parameter's value itself as the GPUs or CPUs of a single role (``resources``).
    """
    name, ph = inp.name, inp.placeholder
    found: list[str] = []
    for path, a, b in _diff(app, other, ""):
        if path == "name":  # the app's name does not reach a native step
            continue
        field_name = _field_name(path)
        if field_name in _SHAPE_FIELDS:
            what = ("the number of roles" if field_name == "roles"
                    else f"{_where(app, path)} (the job's shape)")
            return Problem(name, f"parameter {name!r} decides {what}", shape=True)
        if (path in _RESOURCE_PATHS and inp.scalar in ("int", "float") and len(app.roles) == 1
                and (a, b) == values and field_name not in resources):
            resources[field_name] = name  # the value itself: KFP sets it from the parameter
            continue
        if not _templatable(path) or not isinstance(a, str) or not isinstance(b, str):
            return Problem(name, f"parameter {name!r} decides {_where(app, path)}, which a KFP "
                                 "step fixes when the pipeline is compiled")
        if base_text not in a or a.replace(base_text, ph).replace(ph, alt_text) != b:
            return Problem(name, f"parameter {name!r}: the component computes "
                                 f"{_where(app, path)} from it (the text is not the value's)")
        found.append(path)
    for path in found:
        templates[path] = templates.get(path, _get(app, path)).replace(base_text, ph)
    return None


def _get(app: AppDef, path: str) -> str:
    role = app.roles[int(path[len("roles["):path.index("]")])]
    tail = path.split(".", 1)[1]
    return role.entrypoint if tail == "entrypoint" else role.args[int(tail[len("args["):-1])]
