"""Which tether job a Prefect task run owns: the job key, and the flow run the job belongs to.

Prefect gives a task run a new id whenever a flow run is run again (a retry from the UI
after a crash, a flow-level retry), so the task run id cannot name the job. What Prefect
keeps across runs of one flow run is:

* the **flow run id**;
* the **task key** (the task function's identity);
* the task's **parameters**, and what else it runs (component, scheduler, cfg, image, env);
* the **call number**: how many calls of the same task with the same parameters this run of
  the flow made before (0 for the first). Prefect 3.7 gives locally run task runs random
  dynamic keys, so tether counts calls itself, per run of the flow (a flow retry counts from
  0 again) and once per task run (a task retry keeps its number). Calls with equal
  parameters are interchangeable, so the count is deterministic where it matters even when
  ``.submit()``/``.map()`` start them concurrently.

The job key hashes these: a rerun of the same flow run finds the job an earlier run
launched (re-attaching to it while it runs, or taking the result of one that succeeded), a
task retry within a run does too, and a new flow run launches new jobs. Changed parameters
make a new job. A job that failed or was cancelled is submitted again.

Every job also carries its flow run id (environment variable :data:`FLOW_RUN_ENV` and app
metadata), which is how ``tether prefect reap`` finds the jobs of flow runs that ended.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from tether.adapters.common import job_key
from tether.specs import AppDef

ORCHESTRATOR = "prefect"

FLOW_RUN_ENV = "TETHER_PREFECT_FLOW_RUN_ID"
"""Environment variable (of every role) naming the flow run that launched the job."""

FLOW_RUN_METADATA = "tether.prefect/flow-run-id"
"""App metadata key with the same flow run id."""


def _stable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _stable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def parameters_digest(arguments: Mapping[str, Any]) -> str:
    """A stable hash of a task call's component arguments.

    Args:
        arguments: The component's keyword arguments.

    Returns:
        Hex digest.
    """
    text = json.dumps(_stable(arguments), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_COUNT_LOCK = threading.Lock()
_PREFIX = "tether:"


def call_numbers(
    counters: dict[str, Any] | None, task_key: str, digest: str, task_run_id: UUID | str
) -> tuple[int, int]:
    """Numbers one task call within a run of the flow (stable across the task run's retries).

    Args:
        counters: A dict living as long as this run of the flow (Prefect's
            ``FlowRunContext.task_run_dynamic_keys``; tether's entries are prefixed
            ``tether:``), or None outside a flow.
        task_key: Prefect's task key.
        digest: :func:`parameters_digest` of the call.
        task_run_id: The task run.

    Returns:
        The call number among calls with these parameters, and among all calls of the task
        (in the order they started).
    """
    if counters is None:
        return 0, 0
    mine = f"{_PREFIX}run:{task_run_id}"
    with _COUNT_LOCK:
        known = counters.get(mine)
        if isinstance(known, str) and "/" in known:
            first, _, second = known.partition("/")
            return int(first), int(second)
        same_key, any_key = f"{_PREFIX}{task_key}:{digest}", f"{_PREFIX}{task_key}"
        same = int(counters.get(same_key, 0))
        any_ = int(counters.get(any_key, 0))
        counters[same_key], counters[any_key] = same + 1, any_ + 1
        counters[mine] = f"{same}/{any_}"
    return same, any_


def task_job_key(
    flow_run_id: UUID | str | None,
    task_key: str,
    call_number: int,
    arguments: Mapping[str, Any],
    task_run_id: UUID | str | None = None,
    spec_digest: str = "",
) -> str:
    """The job key of one task call (see the module docs for the rule).

    Args:
        flow_run_id: The flow run; None for a task run outside a flow (then the key is the
            task run id: nothing outlives that task run).
        task_key: Prefect's task key.
        call_number: The call's number among calls with the same parameters
            (:func:`call_numbers`).
        arguments: The component's keyword arguments.
        task_run_id: The task run (used only without a flow run).
        spec_digest: What the task runs besides its parameters (component, scheduler, cfg,
            image, env: :meth:`~tether.adapters.prefect.task.TaskSpec.digest`), so that
            two tasks of one name that differ only there never share a job.

    Returns:
        The key, e.g. ``prefect-3f2a...``.
    """
    if flow_run_id is None:
        return job_key(ORCHESTRATOR, "no-flow-run", task_run_id)
    return job_key(ORCHESTRATOR, flow_run_id, task_key, spec_digest, call_number,
                   parameters_digest(arguments))


def tag_with_flow_run(app: AppDef, flow_run_id: UUID | str | None) -> None:
    """Records the flow run in the app (every role's env and the app's metadata).

    Args:
        app: The app, changed in place.
        flow_run_id: The flow run, or None (nothing recorded).
    """
    if flow_run_id is None:
        return
    app.metadata[FLOW_RUN_METADATA] = str(flow_run_id)
    for role in app.roles:
        role.env[FLOW_RUN_ENV] = str(flow_run_id)


def flow_run_of(app: AppDef | None) -> str | None:
    """The flow run a job was launched by, as far as the scheduler still knows the app.

    Args:
        app: The app as the scheduler describes it.

    Returns:
        The flow run id, or None for jobs no Prefect task launched.
    """
    if app is None:
        return None
    value = app.metadata.get(FLOW_RUN_METADATA)
    if value:
        return str(value)
    for role in app.roles:
        if role.env.get(FLOW_RUN_ENV):
            return role.env[FLOW_RUN_ENV]
    return None
