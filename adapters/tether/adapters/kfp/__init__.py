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

Compile a pipeline with ``python -m tether.adapters.kfp.compile module:pipeline out.yaml``;
show what a step becomes with :meth:`TetherStep.dryrun` or ``python -m
tether.adapters.kfp.dryrun COMPONENT -a NAME=VALUE``.

Requires ``kfp`` 2.x and ``kfp-kubernetes`` (``pip install 'tether[kfp]'``). KFP is imported
when a step is called, not when this package is imported.
"""

from __future__ import annotations

from tether.adapters.kfp.native import NativeStepError
from tether.adapters.kfp.options import KubernetesOptions, LauncherOptions
from tether.adapters.kfp.steps import StepArgumentError, StepPlan, TetherStep, step

__all__ = [
    "KubernetesOptions",
    "LauncherOptions",
    "NativeStepError",
    "StepArgumentError",
    "StepPlan",
    "TetherStep",
    "step",
]
