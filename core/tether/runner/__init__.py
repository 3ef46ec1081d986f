"""The Runner: run, dry-run, wait, cancel, logs and outputs of jobs on any scheduler.

The Runner and its environment names are imported with the package; the types of what a
caller follows or finds (:class:`AppEvent`, :class:`ExistingJob`, :class:`RunOutcome`,
:class:`LogLine`) and :func:`fan_in` on first use (PEP 562), so that a dry run does not
import the modules that define them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.runner.api import Runner, get_runner
from tether.runner.launched import UnknownAppError
from tether.runner.wiring import ENV_JOB_KEY
from tether.tracker.env import ENV_JOB_ID, ENV_PARENT_RUN_ID, ENV_TRACKERS, tracker_config_env

if TYPE_CHECKING:
    from tether.runner.events import AppEvent
    from tether.runner.logs import LogLine, fan_in
    from tether.runner.reattach import ExistingJob, RunOutcome

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

_LAZY: dict[str, str] = {
    "AppEvent": "tether.runner.events",
    "ExistingJob": "tether.runner.reattach",
    "RunOutcome": "tether.runner.reattach",
    "LogLine": "tether.runner.logs",
    "fan_in": "tether.runner.logs",
}


def __getattr__(name: str) -> Any:
    """Imports a lazily exported name's module on first use."""
    module = _LAZY.get(name)
    if module is None:  # an AttributeError lets ``from tether.runner import follow`` import it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
