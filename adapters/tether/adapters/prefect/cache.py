"""Prefect cache policies of component tasks.

Caching is **off** by default (``NO_CACHE``): a component task runs a job every time it is
called in a new flow run. Two opt-ins:

* ``cache_policy=JOB_INPUTS`` caches across flow runs. The key covers everything that
  decides what the job does: the component (its name and source code), its arguments, the
  scheduler (the configured default is resolved), cfg, image and env. Env values enter the
  key only as hashes, and the key itself is a hash: no value, secret or not, is stored in
  it. Change any of these and the task runs a new job. Add ``cache_expiration`` to bound
  how long a result is reused; ``refresh_cache=True`` forces a new job.
* Any other policy (Prefect's ``INPUTS``, ``DEFAULT``, ``TASK_SOURCE``, a ``cache_key_fn``...)
  works as Prefect documents it, scoped to the component task: its key is hashed together
  with what :data:`JOB_INPUTS` keys on besides the arguments (component name and source,
  scheduler, cfg, image, env hashes), so two different components, schedulers, cfgs, images
  or envs never share an entry, whatever the policy keys on.
* ``persist_result=True`` (without a cache policy) stores every result in Prefect's result
  storage (``PREFECT_RESULTS_*``) under the job's identity (:mod:`.identity`): a rerun of
  the same flow run takes the stored result without even looking for the job; other flow
  runs are not affected.

Results are :class:`~tether.adapters.common.JobResult` objects (outputs included), pickled by
Prefect's default serializer.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, replace
from typing import Any

from prefect.cache_policies import NO_CACHE, CachePolicy
from prefect.context import TaskRunContext

from tether.adapters.prefect.identity import call_numbers, parameters_digest, task_job_key
from tether.adapters.prefect.spec import SPEC_ATTR


def _spec(task_ctx: TaskRunContext) -> Any:
    return getattr(task_ctx.task.fn, SPEC_ATTR, None)


def _source_digest(fn: Any) -> str:
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', repr(fn))}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _scheduler(spec: Any) -> str:
    if spec.scheduler:
        return str(spec.scheduler)
    from tether.runner import get_runner

    with get_runner() as runner:
        return str(spec.resolve_scheduler(runner))


def _task_digest(spec: Any) -> str:
    """What a component task runs besides its arguments, the scheduler resolved (env values
    enter hashed)."""
    return parameters_digest({
        "spec": replace(spec, scheduler=_scheduler(spec)).digest(),
        "source": _source_digest(spec.fn),
    })


@dataclass
class JobInputs(CachePolicy):
    """Cache key: component (name and source), arguments, scheduler, cfg, image, env."""

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        """The key of one call (None, so no caching, for a task that is no component task).

        Args:
            task_ctx: The task run's context.
            inputs: The task's parameters.
            flow_parameters: The flow's parameters (not part of the key).
            **kwargs: Ignored.

        Returns:
            ``tether-<hash>``.
        """
        spec = _spec(task_ctx)
        if spec is None:
            return None
        # the scheduler resolved: left to the configured default or named, one key
        digest = parameters_digest({
            "task": _task_digest(spec),
            "args": spec.component_args(inputs),
        })
        return f"tether-{digest}"


@dataclass
class RunScoped(CachePolicy):
    """Result key = the job's identity: results persist, reuse stays within one flow run."""

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        """The job key of this call (see :mod:`tether.adapters.prefect.identity`).

        Args:
            task_ctx: The task run's context.
            inputs: The task's parameters.
            flow_parameters: Not used.
            **kwargs: Ignored.

        Returns:
            ``tether-run-<job key>``, or None outside a flow run.
        """
        from prefect.context import FlowRunContext

        spec = _spec(task_ctx)
        task_run = task_ctx.task_run
        if spec is None or task_run.flow_run_id is None:
            return None
        args = spec.component_args(inputs)
        flow_ctx = FlowRunContext.get()
        counters = getattr(flow_ctx, "task_run_dynamic_keys", None) if flow_ctx else None
        same, _ = call_numbers(counters if isinstance(counters, dict) else None,
                               task_run.task_key, parameters_digest(args), task_run.id)
        key = task_job_key(task_run.flow_run_id, task_run.task_key, same, args, task_run.id,
                           spec.digest())
        return f"tether-run-{key}"


@dataclass
class ComponentScoped(CachePolicy):
    """A user's policy, its key scoped to what the component task runs.

    Attributes:
        inner: The policy the user chose (``INPUTS``, ``DEFAULT``, a ``cache_key_fn``...).
    """

    inner: CachePolicy | None = None

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        """The inner policy's key hashed with the task's digest (None: no caching).

        Args:
            task_ctx: The task run's context.
            inputs: The task's parameters.
            flow_parameters: The flow's parameters.
            **kwargs: Passed to the inner policy.

        Returns:
            ``tether-scoped-<hash>``, or None when the inner policy gives no key.
        """
        if self.inner is None:
            return None
        key = self.inner.compute_key(task_ctx, inputs, flow_parameters, **kwargs)
        spec = _spec(task_ctx)
        if key is None or spec is None:
            return key
        return f"tether-scoped-{parameters_digest({'key': key, 'task': _task_digest(spec)})}"


def scope_cache_policy(policy: Any) -> Any:
    """The policy a component task uses for the one Prefect made of its options.

    Tether's own policies and ``NO_CACHE`` stay; any other is wrapped in
    :class:`ComponentScoped`, keeping its key storage, isolation level and lock manager.

    Args:
        policy: The task's ``cache_policy`` as Prefect set it.

    Returns:
        The policy to use.
    """
    if not isinstance(policy, CachePolicy) or policy is NO_CACHE or isinstance(
            policy, JobInputs | RunScoped | ComponentScoped):
        return policy
    return ComponentScoped(key_storage=policy.key_storage,
                           isolation_level=policy.isolation_level,
                           lock_manager=policy.lock_manager, inner=policy)


JOB_INPUTS = JobInputs()
"""Cache across flow runs on everything the job runs (see the module docs)."""

RUN_SCOPED = RunScoped()
"""Persist results under the job identity; what ``persist_result=True`` alone uses."""


def default_cache_policy(persist_result: bool | None) -> CachePolicy:
    """The policy of a component task given no ``cache_policy``/``cache_key_fn``.

    Args:
        persist_result: The task's ``persist_result`` option.

    Returns:
        :data:`RUN_SCOPED` when results are to be persisted, else ``NO_CACHE``.
    """
    return RUN_SCOPED if persist_result else NO_CACHE
