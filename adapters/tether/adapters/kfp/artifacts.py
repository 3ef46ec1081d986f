"""KFP artifacts of a step: component parameters that are paths/URIs of KFP artifacts.

A component declares that a ``str`` parameter is an artifact with ``Annotated`` (tether
itself sees a ``str``: on the command line it is a path or URL)::

    from typing import Annotated
    from kfp.dsl import Dataset, Input, Model, Output

    def train(data: Annotated[str, Input[Dataset]], model: Annotated[str, Output[Model]],
              epochs: int = 3) -> AppDef: ...

or the step declares it for components it cannot change:
``step("utils.python", artifacts={"model_dir": Output[Model]})``.

In the pipeline an input artifact is wired like any KFP artifact (``data=prep.outputs["data"]``)
and an output artifact is not passed: it is an output of the task (``t.outputs["model"]``).
What the job gets:

* **native** step: the artifact's local path in the container, which KFP fills and uploads
  (``{{$.inputs.artifacts['data'].path}}``, ``{{$.outputs.artifacts['model'].path}}``);
* **launcher** step: the artifact's URI (``gs://``, ``s3://``; KFP's ``minio://`` store as
  ``s3://``; a local path under ``kfp.local``), which the job reads or writes itself. When the
  job has written an output to its URI and the step's local path for it is empty, the step
  copies it there, so KFP's upload at the end of the step keeps the job's content.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tether.adapters.kfp.signature import StepInput
from tether.errors import SpecError

INPUT = "input"
OUTPUT = "output"


class ArtifactDeclarationError(SpecError):
    """An artifact declaration names a parameter that cannot be one (the message says why)."""


def _kfp_artifact(annotation: Any) -> tuple[str, Any] | None:
    """``(direction, artifact class)`` of ``Input[X]`` / ``Output[X]``, else None."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return None
    try:
        from kfp.dsl.types import type_annotations as ta
    except ImportError:
        return None
    if ta.is_artifact_wrapped_in_Input(annotation):
        return INPUT, ta.get_io_artifact_class(annotation)
    if ta.is_artifact_wrapped_in_Output(annotation):
        return OUTPUT, ta.get_io_artifact_class(annotation)
    return None


def declared_artifacts(fn: Callable[..., Any],
                       extra: Mapping[str, Any] | None = None) -> dict[str, tuple[str, Any]]:
    """The artifact parameters of a component: from ``Annotated`` metadata and ``extra``.

    Args:
        fn: The component function.
        extra: Parameter name -> ``Input[X]`` / ``Output[X]`` (the step's ``artifacts=``).

    Returns:
        Parameter name -> (direction, KFP artifact class).

    Raises:
        ArtifactDeclarationError: For an ``extra`` value that is not ``Input[X]`` or
            ``Output[X]``.
    """
    out: dict[str, tuple[str, Any]] = {}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable annotations: the component check reports them
        hints = {}
    for name, hint in hints.items():
        if typing.get_origin(hint) is typing.Annotated:
            for meta in typing.get_args(hint)[1:]:
                found = _kfp_artifact(meta)
                if found:
                    out[name] = found
    for name, annotation in (extra or {}).items():
        found = _kfp_artifact(annotation)
        if found is None:
            raise ArtifactDeclarationError(
                f"artifacts[{name!r}] = {annotation!r}: declare Input[X] or Output[X] with a KFP "
                "artifact type X (from kfp.dsl import Dataset, Input, Model, Output)")
        out[name] = found
    return out


def with_artifacts(inputs: Sequence[StepInput],
                   artifacts: Mapping[str, tuple[str, Any]]) -> list[StepInput]:
    """The step's inputs with the artifact parameters marked.

    Args:
        inputs: The inputs.
        artifacts: From :func:`declared_artifacts`.

    Returns:
        New inputs.

    Raises:
        ArtifactDeclarationError: For a name that is not a ``str`` parameter.
    """
    by_name = {i.name: i for i in inputs}
    for name in artifacts:
        inp = by_name.get(name)
        if inp is None:
            raise ArtifactDeclarationError(
                f"artifact {name!r} is not a parameter of the component (parameters: "
                f"{', '.join(by_name) or 'none'})")
        if inp.scalar != "str" or inp.varargs:
            raise ArtifactDeclarationError(
                f"artifact parameter {name!r} has type {inp.type_text}; an artifact reaches "
                "the job as a path or URI, so the parameter must be a str")
    out = []
    for inp in inputs:
        if inp.name in artifacts:
            direction, cls = artifacts[inp.name]
            inp = dataclasses.replace(inp, artifact=direction, artifact_class=cls)
        out.append(inp)
    return out


def annotation_of(inp: StepInput) -> Any:
    """The annotation a KFP component function uses for this input."""
    if not inp.artifact:
        return inp.annotation
    from kfp import dsl

    wrapper = dsl.Input if inp.artifact == INPUT else dsl.Output
    return wrapper[inp.artifact_class]


def job_uri(uri: str) -> str:
    """An artifact URI as the job sees it (``minio://`` is S3 to everyone but KFP).

    Args:
        uri: The artifact's URI.

    Returns:
        The URI to hand to the job.
    """
    return "s3://" + uri[len("minio://"):] if uri.startswith("minio://") else uri


def artifact_values(args: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The component's arguments with each artifact object replaced by its URI.

    Args:
        args: The step's arguments (artifact objects for artifact parameters).
        names: The artifact parameters.

    Returns:
        New arguments.
    """
    out = dict(args)
    for name in names:
        art = out.get(name)
        if art is not None and hasattr(art, "uri"):
            out[name] = job_uri(str(art.uri))
    return out


def collect_outputs(args: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Copies outputs the job wrote to their URIs into the step's local paths, where empty.

    KFP uploads each output artifact's local path when the step ends; a job running
    elsewhere wrote to the URI instead, so its content is brought back first (nothing to do
    when the path and the URI are the same file, as under ``kfp.local``).

    Args:
        args: The step's arguments (artifact objects).
        names: The output artifact parameters.

    Returns:
        The URIs copied.
    """
    copied: list[str] = []
    for name in names:
        art = args.get(name)
        if art is None or not hasattr(art, "uri"):
            continue
        uri, path = job_uri(str(art.uri)), str(art.path)
        if os.path.exists(path) or os.path.abspath(uri) == os.path.abspath(path):
            continue
        import fsspec

        fs, remote = fsspec.core.url_to_fs(uri)
        if not fs.exists(remote):
            continue
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if fs.isdir(remote):
            fs.get(remote, path, recursive=True)
        else:
            fs.get(remote, path)
        copied.append(uri)
    return copied
