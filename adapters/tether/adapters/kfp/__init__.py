"""Kubeflow Pipelines v2 adapter: tether components as KFP steps.

``step(component, scheduler=..., cfg=..., mode="auto", image=...)`` returns a step that a
``@dsl.pipeline`` calls like any KFP component, with the component's typed parameters as its
inputs. A call becomes one of:

* a **native** step (one role of one replica on Kubernetes): a container component with the
  role's image, command, env, resources, retries and pod settings
  (:mod:`tether.adapters.kfp.native`);
* a **launcher** step (several roles or replicas, run options, declared outputs, or any
  scheduler other than Kubernetes, e.g. ``local_cwd``): a lightweight Python
  component that runs tether, which submits the job, streams every replica's log into the
  step's log, waits, publishes the job's outputs as the step's output parameters and cancels
  the job when the step is terminated (:mod:`tether.adapters.kfp.launcher`,
  :mod:`tether.adapters.kfp.launch`).

Pipeline values of ``str``/``int``/``float``/``bool`` parameters keep a step native
(:mod:`~tether.adapters.kfp.probe`); a launcher step ships the component's code
(:mod:`~tether.adapters.kfp.ship`) and passes the task's settings to its job
(:mod:`~tether.adapters.kfp.inherit`); artifact parameters map to paths/URIs
(:mod:`~tether.adapters.kfp.artifacts`); :meth:`TetherStep.as_component` is the step as a
KFP component. User guide: ``docs/kfp.md``.

Compile a pipeline with ``tether kfp compile module:pipeline out.yaml``; show the mode of each
step with ``tether kfp dryrun module:pipeline``, or what one step becomes with
:meth:`TetherStep.dryrun` / ``tether kfp dryrun COMPONENT -a NAME=VALUE``.

Requires ``kfp`` 2.x and ``kfp-kubernetes`` (``pip install 'tether[kfp]'``). KFP is imported
when a step is called, not when this package is imported.
"""

from __future__ import annotations

from tether.adapters.kfp.native import NativeStepError
from tether.adapters.kfp.options import KubernetesOptions, LauncherOptions
from tether.adapters.kfp.stepchecks import StepArgumentError, StepSettingError
from tether.adapters.kfp.steps import (
    LauncherFallbackWarning,
    StepPlan,
    TetherStep,
    step,
)

__all__ = [
    "KubernetesOptions",
    "LauncherFallbackWarning",
    "LauncherOptions",
    "NativeStepError",
    "StepArgumentError",
    "StepPlan",
    "StepSettingError",
    "TetherStep",
    "step",
]
