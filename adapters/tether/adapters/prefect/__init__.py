"""Prefect 3 adapter: tether components as Prefect tasks.

``component_task("utils.python", scheduler="local_cwd", retries=1)`` is a Prefect task
whose parameters are the component's; each run submits (or re-attaches to) one tether job,
streams its logs into the task run's logger, publishes artifacts and returns the job's
:class:`~tether.adapters.common.JobResult`. :func:`dryrun` shows what a call would run.
"""

from tether.adapters.common import JobFailedError, JobResult
from tether.adapters.prefect.dryrun import TaskDryRun, dryrun
from tether.adapters.prefect.task import JobStoppedError, TaskSpec, component_task

__all__ = [
    "JobFailedError",
    "JobResult",
    "JobStoppedError",
    "TaskDryRun",
    "TaskSpec",
    "component_task",
    "dryrun",
]
