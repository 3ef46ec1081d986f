"""Checks of a KFP step: its settings when it is made, a call's arguments when it is called.

Every error names the step's component, the field and the value, and what is allowed (with
a close match where one exists). A scheduler whose client is missing where the pipeline is
compiled is not an error: its run options go unchecked here, and its steps are launcher steps.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tether.adapters.common import check_candidates
from tether.adapters.kfp.native import NativeStepError
from tether.adapters.kfp.options import MODE_NATIVE, MODES
from tether.adapters.kfp.signature import StepInput
from tether.errors import SpecError
from tether.specs import CfgVal, SecretRef

log = logging.getLogger(__name__)


class StepArgumentError(SpecError):
    """A step was called with arguments the component does not take or is missing."""


class StepSettingError(SpecError):
    """A step's own setting (its mode, its scheduler) is not one tether knows."""


def check_mode(mode: str) -> None:
    """Checks a step's ``mode``.

    Args:
        mode: The mode asked for.

    Raises:
        StepSettingError: For a mode that is not one of :data:`~.options.MODES`.
    """
    if mode not in MODES:
        close = difflib.get_close_matches(str(mode), MODES, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise StepSettingError(f"mode={mode!r} is not one of {', '.join(MODES)}{hint}")


def check_native_schedulers(component_name: str, mode: str, schedulers: Sequence[str]) -> None:
    """Checks that a step forced native has one scheduler.

    Args:
        component_name: The step's component.
        mode: The step's mode.
        schedulers: The schedulers to try in order.

    Raises:
        NativeStepError: For ``mode='native'`` with several schedulers.
    """
    if mode == MODE_NATIVE and len(schedulers) > 1:
        raise NativeStepError(
            f"step {component_name!r}: mode='native' with scheduler={list(schedulers)!r}: a "
            "native step is one KFP container step on the pipeline's own cluster and cannot "
            "move to another scheduler; give one scheduler, or use mode='launcher' (or "
            "'auto'): a launcher step tries the schedulers in order"
        )


def check_native_outputs(component_name: str, mode: str,
                         outputs: Sequence[tuple[str, str]]) -> None:
    """Checks that a step forced native declares no outputs.

    Args:
        component_name: The step's component.
        mode: The step's mode.
        outputs: The declared outputs (name, type).

    Raises:
        NativeStepError: For ``mode='native'`` with outputs.
    """
    if mode == MODE_NATIVE and outputs:
        raise NativeStepError(
            f"{component_name}: outputs={[n for n, _ in outputs]} need a launcher step (only "
            "tether can read a job's outputs); use mode='launcher' or 'auto'"
        )


def check_secrets(secrets: Mapping[str, SecretRef] | None) -> dict[str, SecretRef]:
    """Checks a step's ``secrets``: references, never values.

    Args:
        secrets: Env variable name -> secret reference.

    Returns:
        The same, as a dict.

    Raises:
        StepArgumentError: For a value that is not a :class:`~tether.specs.SecretRef`.
    """
    out: dict[str, SecretRef] = {}
    for env_name, ref in (secrets or {}).items():
        if not isinstance(ref, SecretRef):
            raise StepArgumentError(
                f"secrets[{env_name!r}] = {type(ref).__name__}: give a "
                "tether.specs.SecretRef(name, key), never the secret's value")
        out[str(env_name)] = ref
    return out


def check_scheduler(component_name: str, schedulers: Sequence[str],
                    cfg: Mapping[str, CfgVal]) -> bool:
    """Checks a step's schedulers and run options, and says whether it can be native.

    Args:
        component_name: The step's component.
        schedulers: The schedulers to try in order (one, or a failover list).
        cfg: The run options.

    Returns:
        Whether the (one) scheduler's replicas are Kubernetes pods (its capability); False
        for a list, or a scheduler whose client is missing here.

    Raises:
        StepSettingError: For an unknown scheduler (with close matches).
        InvalidRunConfigException: For a run option the scheduler does not declare.
    """
    from tether.runner import get_runner

    scheduler = ",".join(schedulers)
    pods = False
    with get_runner() as runner:
        if len(schedulers) > 1:  # a launcher step; every candidate checked here
            check_candidates(runner, schedulers, cfg, f"step {component_name!r}")
            return False
        known = runner.scheduler_backends()
        if scheduler not in known:
            close = difflib.get_close_matches(scheduler, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise StepSettingError(
                f"unknown scheduler {scheduler!r}{hint} (available: {', '.join(known)})")
        try:
            pods = runner.scheduler_capabilities(scheduler).kubernetes_pods
        except Exception as e:  # its client may be missing where we compile
            log.warning("cannot create scheduler %s here (%s): its steps are launcher "
                        "steps", scheduler, e)
        if not cfg:
            return pods
        try:
            opts = runner.scheduler_run_opts(scheduler)
        except Exception as e:  # the scheduler's client may be missing where we compile
            log.debug("cannot check the run options of %s here: %s", scheduler, e)
            return pods
    opts.check_names(cfg, scheduler)  # as the scheduler takes them (aliases, camelCase)
    return pods


def check_names(component_name: str, inputs: Sequence[StepInput],
                kwargs: Mapping[str, Any]) -> None:
    """Checks that the component takes every argument named.

    Args:
        component_name: The step's component.
        inputs: The step's inputs (the component's parameters).
        kwargs: Arguments.

    Raises:
        StepArgumentError: For a name it does not take (with close matches).
    """
    params = [i.name for i in inputs]
    for key in kwargs:
        if key not in params:
            close = difflib.get_close_matches(key, params, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise StepArgumentError(
                f"{component_name} has no parameter {key!r}{hint} "
                f"(parameters: {', '.join(params) or 'none'})"
            )


def check_args(component_name: str, inputs: Sequence[StepInput], kwargs: Mapping[str, Any],
               runtime: Sequence[str]) -> None:
    """Checks the arguments of a call of a step.

    Args:
        component_name: The step's component.
        inputs: The step's inputs.
        kwargs: The arguments given.
        runtime: The parameters that are pipeline values (given or not).

    Raises:
        StepArgumentError: For a name the component does not take, an output artifact
            passed, an input artifact given a constant, or a required argument missing.
    """
    check_names(component_name, inputs, kwargs)
    for i in inputs:
        if i.artifact == "output" and i.name in kwargs:
            raise StepArgumentError(
                f"{component_name}: {i.name!r} is an output artifact; do not pass it, read it "
                f"from the task: task.outputs[{i.name!r}]")
        if i.artifact == "input" and i.name in kwargs and i.name not in runtime:
            raise StepArgumentError(
                f"{component_name}: {i.name!r} is an input artifact; wire an artifact to it "
                f"(an upstream task's output, or dsl.importer), not {kwargs[i.name]!r}")
    missing = [i.name for i in inputs if i.required and i.artifact != "output"
               and i.name not in kwargs and i.name not in runtime]
    if missing:
        raise StepArgumentError(
            f"{component_name} is missing required argument(s): {', '.join(missing)}")
