"""One KFP step's dry-run: its mode and why, the AppDef, the request, the compiled step.

``TetherStep.dryrun(**kwargs)`` and ``tether kfp dryrun`` (:mod:`tether.adapters.kfp.dryrun`)
both render through :func:`dryrun_step`. This module sits below the step module: it reads a
step through the :class:`DryrunStep` protocol and never imports it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from tether.adapters.common import app_secrets, describe_app, render_dryrun
from tether.specs import AppDef, CfgVal
from tether.specs.secrets import mask_text, mask_value, secret_values, value_secrets


class StepPlanView(Protocol):
    """What a dry-run reads of a step's plan (``StepPlan`` has all of it)."""

    @property
    def mode(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def app(self) -> AppDef | None: ...

    @property
    def warnings(self) -> Sequence[str]: ...


class DryrunStep(Protocol):
    """What a dry-run reads of a step (``TetherStep`` has all of it)."""

    name: str
    component_name: str
    scheduler: str

    @property
    def cfg(self) -> Mapping[str, CfgVal]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    def plan(self, **kwargs: Any) -> StepPlanView: ...

    def __call__(self, **kwargs: Any) -> Any: ...


@dataclass
class StepDryRun:
    """What a step call becomes.

    Attributes:
        step: The step's name.
        component: The component's name.
        mode: ``native`` or ``launcher``.
        reason: Why that mode.
        app: The AppDef summary (None when it can only be built at run time).
        scheduler_request: For launcher steps, the scheduler's native request (redacted).
        kfp_yaml: The compiled one-step pipeline (secrets masked).
        warnings: Why pipeline values made it a launcher step.
    """

    step: str
    component: str
    mode: str
    reason: str
    app: dict[str, Any] | None
    scheduler_request: str | None
    kfp_yaml: str
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        parts = [
            f"# KFP step {self.step!r} ({self.component}): {self.mode} mode",
            f"# why: {self.reason}",
            *[f"# warning: {w}" for w in self.warnings],
            "## AppDef",
            yaml.safe_dump(self.app, sort_keys=False) if self.app else "(built at run time)\n",
        ]
        if self.scheduler_request is not None:
            parts += ["## scheduler request", self.scheduler_request.rstrip() + "\n"]
        parts += ["## KFP pipeline (one step)", self.kfp_yaml]
        return "\n".join(parts)


def _compile_one(step: DryrunStep, kwargs: dict[str, Any]) -> str:
    from kfp import compiler, dsl

    def one_step() -> None:
        step(**kwargs)

    one_step.__annotations__["return"] = None  # KFP reads real annotations, not strings
    pipeline = dsl.pipeline(name=f"{step.name.replace('_', '-')}-dryrun")(one_step)
    with tempfile.TemporaryDirectory(prefix="tether-kfp-dryrun-") as tmp:
        path = os.path.join(tmp, "pipeline.yaml")
        compiler.Compiler().compile(pipeline, path)
        with open(path, encoding="utf-8") as f:
            return f.read()


def dryrun_step(step: DryrunStep, **kwargs: Any) -> StepDryRun:
    """Renders what calling ``step(**kwargs)`` in a pipeline becomes, without running it.

    Args:
        step: The step.
        **kwargs: The component's arguments (constants).

    Returns:
        The dry-run.
    """
    plan = step.plan(**kwargs)
    # the one policy: env and args of the app, the step's env, secret-named arguments
    secrets = app_secrets(plan.app) + secret_values([step.env]) + value_secrets("", kwargs)
    request: str | None = None
    if plan.mode == "launcher":
        if plan.app is None:
            request = "(the AppDef is built when the step runs)"
        else:
            try:
                _, info = render_dryrun(plan.app, step.scheduler, step.cfg)
                request = str(info)
            except Exception as e:  # the scheduler's client may be missing where we render
                request = f"(cannot render the {step.scheduler} request here: {e})"
    return StepDryRun(
        step=step.name,
        component=step.component_name,
        mode=plan.mode,
        reason=plan.reason,
        app=describe_app(plan.app) if plan.app else None,
        scheduler_request=mask_text(request, secrets) if request else request,
        kfp_yaml=mask_text(_compile_one(step, kwargs), secrets),
        warnings=[mask_value("", w, secrets) for w in plan.warnings],
    )
