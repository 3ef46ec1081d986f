"""The Runner: run, dry-run, wait, cancel, logs and outputs of jobs on any scheduler."""

from tether.runner.api import ExistingJob, Runner, RunOutcome, get_runner
from tether.runner.events import AppEvent
from tether.runner.launched import UnknownAppError
from tether.runner.logs import LogLine, fan_in
from tether.runner.wiring import ENV_JOB_KEY
from tether.tracker.env import ENV_JOB_ID, ENV_PARENT_RUN_ID, ENV_TRACKERS, tracker_config_env

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
