"""What every orchestrator adapter shares: one mechanism each, used by Airflow, Prefect, KFP.

* **The job session** (:class:`JobSession`, :mod:`.session`): submit-or-attach by the one
  re-attach rule, follow the job, pump its logs past a cursor, cancel it, collect its result.
  ``ComponentJob`` is its earlier name. :class:`AsyncJobSession` (:mod:`.async_session`)
  is the same on an event loop: follow a job launched earlier, write its lines, cancel it.
* **Job identity**: :func:`job_key` turns the orchestrator's own ids (DAG run + task + map
  index, flow run + task run, KFP run + task) into a stable key.
* **The log cursor** (:class:`LogCursor`, :mod:`.cursor`) and where it is kept
  (:class:`CursorStore`: an Airflow XCom, a Prefect variable, a file, none).
* **Following** (:class:`Follower`, :class:`AsyncFollower`, :mod:`.follow`): where a
  session's status comes from; every default follows through the process's watch hub
  (:class:`RunnerFollower`, :class:`HubAsyncFollower`).
* **Schedulers** (:mod:`.candidates`): a step's one scheduler or ordered failover list,
  checked (:func:`check_candidates`) before anything is submitted.
* **Outputs**: :class:`JobResult` carries the job's published outputs and final status;
  :class:`JobFailedError` is raised for a job that did not succeed.

Finding and materializing components (:func:`resolve_component`, :func:`component_ref`,
:func:`component_params`, :func:`materialize`) live in :mod:`tether.adapters.components`, and
what is shown of an app with its secrets masked (:func:`app_secrets`, :func:`mask_app_text`,
:func:`describe_app`, :func:`render_dryrun`) in :mod:`tether.adapters.describe`; both are
importable from here too.

Only the public API of ``tether.runner``, ``tether.specs`` and ``tether.components`` is used.
"""

from tether.adapters.common.async_session import AsyncJobSession
from tether.adapters.common.candidates import (
    SchedulerListError,
    check_candidates,
    scheduler_list,
)
from tether.adapters.common.cursor import CursorStore, FileCursorStore, LogCursor
from tether.adapters.common.follow import (
    AsyncFollower,
    Follower,
    HubAsyncFollower,
    PollingAsyncFollower,
    RunnerFollower,
)
from tether.adapters.common.pump import AsyncLogFeed, LineSink, LogPump
from tether.adapters.common.result import JobFailedError, JobResult, job_key
from tether.adapters.common.session import JobSession
from tether.adapters.components import (
    component_params,
    component_ref,
    materialize,
    resolve_component,
)
from tether.adapters.describe import app_secrets, describe_app, mask_app_text, render_dryrun

ComponentJob = JobSession
"""The earlier name of :class:`JobSession`."""

__all__ = [
    "AsyncFollower",
    "AsyncJobSession",
    "AsyncLogFeed",
    "ComponentJob",
    "CursorStore",
    "FileCursorStore",
    "Follower",
    "HubAsyncFollower",
    "JobFailedError",
    "JobResult",
    "JobSession",
    "LineSink",
    "LogCursor",
    "LogPump",
    "PollingAsyncFollower",
    "RunnerFollower",
    "SchedulerListError",
    "app_secrets",
    "check_candidates",
    "component_params",
    "component_ref",
    "describe_app",
    "job_key",
    "mask_app_text",
    "materialize",
    "render_dryrun",
    "resolve_component",
    "scheduler_list",
]
