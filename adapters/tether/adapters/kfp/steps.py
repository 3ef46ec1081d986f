"""``step()``: a tether component as a KFP v2 step, native or launcher, chosen per call.

A :class:`TetherStep` is called inside a ``@dsl.pipeline`` like any KFP component, with the
component's parameters as keyword arguments (constants, pipeline parameters or upstream
outputs), and returns the KFP task. At each call it builds the AppDef (pipeline values stand
in as KFP input placeholders) and picks the mode:

* **native** when the scheduler is Kubernetes, the AppDef is one role of one replica, no run
  options or outputs are asked for and every pipeline value reaches the command verbatim: a
  container step whose pod is the job (:mod:`tether.adapters.kfp.native`);
* **launcher** otherwise: a step that runs tether, which submits the AppDef to the scheduler
  and waits (:mod:`tether.adapters.kfp.launcher`, :mod:`tether.adapters.kfp.launch`).

``mode="native"`` or ``mode="launcher"`` forces one; a forced native step that cannot be
expressed fails when the pipeline is compiled, naming the role and the field. The step's
settings and each call's arguments are checked by :mod:`tether.adapters.kfp.stepchecks`.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.adapters.common import (
    component_params,
    materialize,
    resolve_component,
    scheduler_list,
)
from tether.adapters.kfp.artifacts import declared_artifacts, with_artifacts
from tether.adapters.kfp.component import as_component, component_yaml
from tether.adapters.kfp.launcher import build_launcher_component
from tether.adapters.kfp.native import (
    NativeStepError,
    apply_task_settings,
    build_native_component,
    role_problems,
    runtime_problems,
    substitute_macros,
    topology_problems,
)
from tether.adapters.kfp.options import (
    DEFAULT_SCHEDULER,
    MODE_AUTO,
    MODE_LAUNCHER,
    MODE_NATIVE,
    KubernetesOptions,
    LauncherOptions,
)
from tether.adapters.kfp.probe import probe
from tether.adapters.kfp.records import record
from tether.adapters.kfp.ship import ship
from tether.adapters.kfp.signature import (
    PIPELINE_ROOT_INPUT,
    RUN_ID_INPUT,
    TASK_ID_INPUT,
    TASK_NAME_INPUT,
    StepInput,
    parse_outputs,
    step_identifier,
    step_inputs,
)
from tether.adapters.kfp.spec import ENV_NAMESPACE, LaunchSpec
from tether.adapters.kfp.stepchecks import (
    StepArgumentError,
    check_args,
    check_mode,
    check_native_outputs,
    check_native_schedulers,
    check_scheduler,
    check_secrets,
)
from tether.adapters.kfp.stepdryrun import StepDryRun, dryrun_step
from tether.specs import AppDef, CfgVal, Role, SecretRef

if TYPE_CHECKING:
    from kfp.dsl.base_component import BaseComponent
    from kfp.dsl.graph_component import GraphComponent
    from kfp.dsl.pipeline_task import PipelineTask


log = logging.getLogger(__name__)


class LauncherFallbackWarning(UserWarning):
    """An automatic step became a launcher step because the job depends on a pipeline value.

    Issued when the pipeline is compiled; the message names the step and the parameter.
    """


@dataclass
class StepPlan:
    """What one call of a step turns into.

    Attributes:
        mode: ``native`` or ``launcher``.
        reason: Why that mode.
        app: The AppDef, with KFP placeholders for pipeline values (None when the component
            cannot build it before the pipeline runs).
        role: For native steps, the role with macros substituted.
        runtime: Names of the arguments wired to pipeline values.
        warnings: Why pipeline values made an automatic step a launcher step (empty when
            nothing else would keep it from being native).
        resources: For native steps, resource fields set from a pipeline value (``gpu`` /
            ``cpu`` -> parameter).
        metrics: Whether the task has the ``tether_metrics`` output artifact (every launcher
            task; a native one with ``KubernetesOptions(metrics=True)``).
    """

    mode: str
    reason: str
    app: AppDef | None
    role: Role | None = None
    runtime: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    resources: dict[str, str] = field(default_factory=dict)
    metrics: bool = False


def _is_runtime(value: Any) -> bool:
    """Whether a value is (or holds) a pipeline value: a channel, or an f-string of one."""
    from kfp.dsl.pipeline_channel import PipelineChannel

    if isinstance(value, PipelineChannel):
        return True
    if isinstance(value, str):
        return "{{channel:" in value
    if isinstance(value, (list, tuple)):
        return any(_is_runtime(v) for v in value)
    if isinstance(value, Mapping):
        return any(_is_runtime(k) or _is_runtime(v) for k, v in value.items())
    return False


def _description(fn: Callable[..., Any]) -> str:
    """The docstring without its sections (the step's description)."""
    import docstring_parser

    try:
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    except docstring_parser.ParseError:
        return (inspect.getdoc(fn) or "").strip()
    return "\n\n".join(p for p in (doc.short_description, doc.long_description) if p).strip()


def _bullets(items: Sequence[str]) -> str:
    return "".join(f"\n  - {i}" for i in items)


class TetherStep:
    """A tether component as a KFP step; call it inside a ``@dsl.pipeline``.

    Create it with :func:`step`. Calling it with the component's arguments (keywords only)
    adds a task to the pipeline being defined and returns it; a launcher task's
    ``.outputs[name]`` are the job's declared outputs (plus ``app_handle`` and ``outputs``, a
    JSON object of all of them); its ``.outputs["tether_metrics"]``, the job's last progress
    report, a native task has too with ``KubernetesOptions(metrics=True)``.
    """

    def __init__(
        self,
        component: str | Callable[..., AppDef],
        scheduler: str | Sequence[str] = DEFAULT_SCHEDULER,
        cfg: Mapping[str, CfgVal] | None = None,
        mode: str = MODE_AUTO,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        outputs: Mapping[str, Any] | Sequence[str] | None = None,
        name: str | None = None,
        k8s: KubernetesOptions | None = None,
        launcher: LauncherOptions | None = None,
        cache: bool = False,
        artifacts: Mapping[str, Any] | None = None,
        secrets: Mapping[str, SecretRef] | None = None,
    ) -> None:
        check_mode(mode)
        self.component = component
        self.component_name, fn = resolve_component(component)
        self.description = _description(fn)
        self.inputs: list[StepInput] = with_artifacts(
            step_inputs(component_params(component)), declared_artifacts(fn, artifacts))
        self._by_name = {i.name: i for i in self.inputs}
        self.schedulers = scheduler_list(scheduler, f"step {self.component_name!r}")
        self.scheduler = ",".join(self.schedulers)  # a failover list as `tether run -s` takes
        check_native_schedulers(self.component_name, mode, self.schedulers)
        self.cfg: dict[str, CfgVal] = dict(cfg or {})
        self.mode = mode
        self.image = image
        self.env = dict(env or {})
        self.secrets = check_secrets(secrets)
        self.outputs = parse_outputs(outputs)
        self.name = step_identifier(name or self.component_name)
        self.k8s = k8s or KubernetesOptions()
        self.launcher = launcher or LauncherOptions()
        self.cache = cache
        self._launcher_component: BaseComponent | None = None
        self._native_interfaces: dict[tuple[Any, ...], Any] = {}
        self._launcher_spec: LaunchSpec | None = None
        # the scheduler's replicas are Kubernetes pods (its capability)
        self._pods = check_scheduler(self.component_name, self.schedulers, self.cfg)
        check_native_outputs(self.component_name, mode, self.outputs)

    @property
    def signature(self) -> inspect.Signature:
        """The step's call signature: the component's parameters, keyword-only."""
        return inspect.Signature([
            inspect.Parameter(i.name, inspect.Parameter.KEYWORD_ONLY, annotation=i.annotation,
                              default=i.default)
            for i in self.inputs
        ])

    # ---- planning ----------------------------------------------------------------------
    def _build_app(self, kwargs: Mapping[str, Any]) -> AppDef:
        app = materialize(self.component, dict(kwargs), image=self.image, env=self.env)
        for role in app.roles:
            role.secrets.update(self.secrets)
        return app

    def _app_for(
        self, kwargs: Mapping[str, Any], runtime: list[str]
    ) -> tuple[AppDef | None, dict[str, str], list[str]]:
        """The AppDef of a call (probed when pipeline values decide it), the resources the
        probe found, and what keeps the pipeline values from being passed natively."""
        if not runtime:
            try:
                return self._build_app(kwargs), {}, []
            except (ValueError, TypeError, KeyError) as e:
                raise StepArgumentError(f"{self.component_name}: {e}") from e
        constants = {k: v for k, v in kwargs.items() if k not in runtime}
        found = probe(self._build_app, [self._by_name[n] for n in runtime], constants, runtime)
        problems = [found.build_error] if found.build_error else [
            p.message for p in found.problems]
        return found.app, found.resources, problems

    def _submission_reasons(self) -> list[str]:
        """Why this step's settings need a scheduler submission (a launcher step)."""
        reasons: list[str] = []
        if len(self.schedulers) > 1:
            reasons.append(f"scheduler names {len(self.schedulers)} schedulers to try in "
                           f"order ({self.scheduler}): tether submits the job, moving it to "
                           "the next one when a scheduler has no room")
        elif not self._pods:
            reasons.append(f"scheduler {self.scheduler!r} does not run its replicas as "
                           "Kubernetes pods: tether submits the job there")
        if self.cfg:
            reasons.append(f"run options {sorted(self.cfg)} apply to a scheduler submission")
        if self.outputs:
            reasons.append("outputs are declared: only tether can read a job's outputs")
        return reasons

    def plan(self, **kwargs: Any) -> StepPlan:
        """Decides how a call with these arguments runs (without adding a task).

        Pipeline values (``str``, ``int``, ``float``, ``bool``) keep a step native when the
        component only passes them into its command (:mod:`tether.adapters.kfp.probe`); when
        the job's shape or settings depend on one, an automatic step becomes a launcher step
        and :attr:`StepPlan.warnings` says which parameter.

        Args:
            **kwargs: The component's arguments.

        Returns:
            The plan.

        Raises:
            StepArgumentError: For unknown or missing arguments, or values the component
                rejects.
            NativeStepError: When the step must be native (forced, or chosen) but the role
                has fields a KFP container step cannot express.
        """
        return self._plan(kwargs, [n for n, v in kwargs.items() if _is_runtime(v)])

    def plan_open(self, fixed: Mapping[str, Any], names: Sequence[str]) -> StepPlan:
        """How a call runs whose arguments are ``fixed`` and, for ``names``, pipeline values
        (the call in :meth:`as_component`), without the pipeline values at hand.

        Args:
            fixed: The constants.
            names: The parameters given pipeline values, in the call's order.

        Returns:
            The plan (the same as :meth:`plan` of that call).

        Raises:
            StepArgumentError: As :meth:`plan`.
            NativeStepError: As :meth:`plan`.
        """
        return self._plan(fixed, list(names))

    def _plan(self, kwargs: Mapping[str, Any], runtime: list[str]) -> StepPlan:
        """:meth:`plan`, the parameters in ``runtime`` being pipeline values (those among
        ``kwargs`` stand in for them; the others are not given)."""
        check_args(self.component_name, self.inputs, kwargs, runtime)
        runtime = runtime + [i.name for i in self.inputs if i.artifact == "output"]
        app, resources, value_problems = self._app_for(kwargs, runtime)
        if self.mode == MODE_LAUNCHER:
            return StepPlan(MODE_LAUNCHER, "mode='launcher'", app, runtime=runtime, metrics=True)
        not_native = self._submission_reasons()
        role: Role | None = None
        if app is None:
            not_native += value_problems
        else:
            topology = topology_problems(app)
            not_native += topology
            if not topology:
                role = substitute_macros(app.roles[0])
                value_problems = runtime_problems(role, [self._by_name[n] for n in runtime])
                not_native += value_problems
        if not_native:
            if self.mode == MODE_NATIVE:
                raise NativeStepError(
                    f"{self.component_name} cannot run as a native KFP step:"
                    f"{_bullets(not_native)}\nUse mode='launcher' (or 'auto')."
                )
            # only the pipeline values keep this step from being native: say so
            warn = value_problems if len(not_native) == len(value_problems) else []
            return StepPlan(MODE_LAUNCHER, "; ".join(not_native), app, runtime=runtime,
                            warnings=warn, metrics=True)
        assert app is not None and role is not None
        problems = role_problems(app.roles[0], metrics=self.k8s.metrics)
        if problems:
            raise NativeStepError(
                f"{self.component_name} cannot run as a native KFP step:{_bullets(problems)}\n"
                "Use mode='launcher' to run it through tether's scheduler instead."
            )
        reason = ("mode='native'" if self.mode == MODE_NATIVE else
                  f"one role of one replica on {self.scheduler}")
        return StepPlan(MODE_NATIVE, reason, app, role=role, runtime=runtime,
                        resources=resources, metrics=self.k8s.metrics)

    # ---- tasks -------------------------------------------------------------------------
    def launch_spec(self) -> LaunchSpec:
        """The fixed part of this step's launcher tasks (with the component's code, unless
        the launcher image has it: :mod:`tether.adapters.kfp.ship`)."""
        display, source = ship(self.component)
        return LaunchSpec(
            component=display,
            source=source.to_dict() if source else None,
            scheduler=self.scheduler,
            cfg=dict(self.cfg),
            image=self.image,
            env=dict(self.env),
            outputs=list(self.outputs),
            artifacts={i.name: i.artifact for i in self.inputs if i.artifact},
            inherit={"secrets": {k: [r.name, r.key] for k, r in self.secrets.items()}}
            if self.secrets else {},
            wait_interval=self.launcher.wait_interval,
            cancel_grace=self.launcher.cancel_grace,
        )

    def launcher_component(self) -> BaseComponent:
        """The launcher step's KFP component (the same for every call of this step)."""
        if self._launcher_component is None:
            self._launcher_spec = self.launch_spec()
            self._launcher_component = build_launcher_component(
                self.name, self.inputs, self._launcher_spec, self.launcher, self.description
            )
        return self._launcher_component

    def __call__(self, **kwargs: Any) -> PipelineTask:
        """Adds a task running the component with these arguments to the pipeline.

        Args:
            **kwargs: The component's arguments: constants, pipeline parameters or upstream
                task outputs.

        Returns:
            The KFP task.
        """
        from kfp import dsl

        plan = self.plan(**kwargs)
        log.info("KFP step %s (%s): %s mode: %s", self.name, self.component_name, plan.mode,
                 plan.reason)
        if plan.warnings:
            warnings.warn(LauncherFallbackWarning(
                f"KFP step {self.name!r} ({self.component_name}) runs in launcher mode, without "
                "the KFP resources, accelerator and retries of a native step, because "
                + "; ".join(plan.warnings)
                + ". Pass a constant for it to keep the step native, or mode='launcher' to "
                "silence this."), stacklevel=2)
        record(self.name, self.component_name, plan.mode, plan.reason, plan.warnings)
        hidden = {
            RUN_ID_INPUT: dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            TASK_NAME_INPUT: dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            TASK_ID_INPUT: dsl.PIPELINE_TASK_ID_PLACEHOLDER,
            PIPELINE_ROOT_INPUT: dsl.PIPELINE_ROOT_PLACEHOLDER,
        }
        given = {k: v for k, v in kwargs.items() if v is not None}  # None: the default
        if plan.mode == MODE_LAUNCHER:
            from kfp import kubernetes

            from tether.adapters.kfp.inherit import bind

            component = self.launcher_component()
            assert self._launcher_spec is not None
            task = bind(component(**given, **hidden), self._launcher_spec)
            task.set_caching_options(self.cache)
            if self._pods:  # the job goes to the pipeline's namespace
                kubernetes.use_field_path_as_env(task, env_name=ENV_NAMESPACE,
                                                 field_path="metadata.namespace")
            if self.launcher.retries:
                task.set_retry(num_retries=self.launcher.retries)
            return task
        assert plan.role is not None
        component, used = build_native_component(
            self.name, self.description, self.inputs, plan.role, self._native_interfaces,
            metrics=self.k8s.metrics,
        )
        task = component(**given, **{h: hidden[h] for h in used})
        task.set_caching_options(self.cache)
        apply_task_settings(task, plan.role, self.k8s,
                            {f: kwargs[p] for f, p in plan.resources.items()})
        return task

    # ---- as a KFP component ----------------------------------------------------------------
    def as_component(self, name: str | None = None, **fixed: Any) -> GraphComponent:
        """The step as a KFP component (a one-step pipeline) whose inputs are the
        parameters not fixed here and whose outputs are its task's: declared outputs, output
        artifacts and ``tether_metrics`` when the task has it
        (:mod:`tether.adapters.kfp.component`).

        Args:
            name: The component's name.
            **fixed: Constants for some parameters (those that must be constants: the
                image, a replica count...).

        Returns:
            A KFP component: it has ``component_spec``, compiles to YAML that
            ``kfp.components.load_component_from_text`` loads, and can be used in other
            pipelines.
        """
        return as_component(self, name=name, **fixed)

    @property
    def component_spec(self) -> Any:
        """The KFP component spec of :meth:`as_component` with every parameter an input."""
        return self.as_component().component_spec

    def to_yaml(self, **fixed: Any) -> str:
        """The step as KFP component YAML (see :meth:`as_component`).

        Args:
            **fixed: Constants for some parameters.

        Returns:
            The YAML text.
        """
        return component_yaml(self.as_component(**fixed))

    def dryrun(self, **kwargs: Any) -> StepDryRun:
        """What a call with these arguments becomes, without adding a task anywhere.

        Args:
            **kwargs: The component's arguments (constants).

        Returns:
            The mode and why, the AppDef, the scheduler's request and the compiled step.
        """
        return dryrun_step(self, **kwargs)

    def __repr__(self) -> str:
        return (f"TetherStep({self.component_name!r}, scheduler={self.scheduler!r}, "
                f"mode={self.mode!r})")


def step(
    component: str | Callable[..., AppDef],
    scheduler: str | Sequence[str] = DEFAULT_SCHEDULER,
    cfg: Mapping[str, CfgVal] | None = None,
    mode: str = MODE_AUTO,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    outputs: Mapping[str, Any] | Sequence[str] | None = None,
    name: str | None = None,
    k8s: KubernetesOptions | None = None,
    launcher: LauncherOptions | None = None,
    cache: bool = False,
    artifacts: Mapping[str, Any] | None = None,
    secrets: Mapping[str, SecretRef] | None = None,
) -> TetherStep:
    """Turns a tether component into a KFP v2 step.

    Example::

        train = step("dist.ddp", scheduler="kubernetes", outputs={"model_uri": str})

        @dsl.pipeline
        def pipeline(script: str = "train.py"):
            t = train(script=script, j="2x4", gpu=4)
            evaluate(model=t.outputs["model_uri"])

    Args:
        component: A component name (``dist.ddp``, ``pkg.module:fn``, ``path/file.py:fn``) or
            function.
        scheduler: Where the job runs. A scheduler whose replicas are Kubernetes pods
            (its ``Capabilities.kubernetes_pods``: ``kubernetes``, or a plugin's that declares
            it) allows native steps; any other scheduler (``local_cwd``...) gets a launcher
            step. A list (``["kubernetes", "local_cwd"]`` or ``"kubernetes,local_cwd"``)
            names the schedulers to try in order: a launcher step whose job runs as one
            logical job that moves to the next candidate when one refuses it for capacity
            (with ``mode="native"``: a :class:`NativeStepError` at once).
        cfg: Run options of the scheduler (they make the step a launcher step); with a list,
            each candidate gets those it declares.
        mode: ``auto``, ``native`` or ``launcher``.
        image: Replaces the image of every role.
        env: Added to the env of every role.
        outputs: The job outputs to expose as the step's output parameters: names (``str``)
            or a dict of name -> type (``str``, ``int``, ``float``, ``bool``, ``list``,
            ``dict``). Needs a launcher step.
        name: The step's name (default: from the component's name).
        k8s: Pod settings of native steps (accelerator type, tolerations, /dev/shm, the
            ``tether_metrics`` artifact...).
        launcher: Image and behaviour of launcher steps.
        cache: Let KFP reuse the result of an earlier execution with the same inputs, in
            both modes. Off by default: a job usually has effects outside the step (a model
            written to storage) that a cached step would silently skip.
        artifacts: ``str`` parameters that are KFP artifacts, as ``Input[X]`` / ``Output[X]``
            (also declared in the component with ``Annotated[str, Input[Dataset]]``; see
            :mod:`tether.adapters.kfp.artifacts`).
        secrets: Env variables of every role from secrets (name ->
            :class:`~tether.specs.SecretRef`): a native step mounts them as secret env, a
            launcher step hands the references to its job; the values are never in the
            compiled pipeline. (``kfp.kubernetes.use_secret_as_env`` on a task does the same.)

    Returns:
        The step; call it inside a ``@dsl.pipeline``.

    Raises:
        ValueError: For an unknown mode or scheduler, a component that is not valid, or bad
            outputs.
    """
    return TetherStep(component, scheduler=scheduler, cfg=cfg, mode=mode, image=image, env=env,
                      outputs=outputs, name=name, k8s=k8s, launcher=launcher,
                      cache=cache, artifacts=artifacts, secrets=secrets)
