"""The Runner: run, dry-run, wait, cancel, logs and outputs of jobs on any scheduler."""

from tether.runner.api import (
    ENV_JOB_ID,
    ENV_JOB_KEY,
    ENV_PARENT_RUN_ID,
    ENV_TRACKERS,
    ExistingJob,
    Runner,
    RunOutcome,
    UnknownAppError,
    get_runner,
    tracker_config_env,
)
from tether.runner.follow import AppEvent
from tether.runner.logs import LogLine, fan_in

__all__ = [
    "ENV_JOB_ID",
    "ENV_JOB_KEY",
    "ENV_PARENT_RUN_ID",
    "ENV_TRACKERS",
    "AppEvent",
    "ExistingJob",
    "LogLine",
    "RunOutcome",
    "Runner",
    "UnknownAppError",
    "fan_in",
    "get_runner",
    "tracker_config_env",
]
