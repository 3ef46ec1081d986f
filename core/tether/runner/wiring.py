"""The tracking environment the Runner gives every role of an app before it renders it.

:func:`wire_env` sets (without overriding what the app already sets) the job's own handle,
the app's name, where its outputs go, the tracking parent run, the job key and the trackers
with their settings, so the job's code finds them whatever scheduler runs it;
:func:`warn_default_image` warns when a remote backend would pull tether's default image.
"""

from __future__ import annotations

import logging
import os

from tether.config import TetherConfig
from tether.schedulers.capabilities import Capabilities
from tether.specs import AppDef, macros, make_app_handle
from tether.tracker.env import (
    ENV_APP_NAME,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_TRACKERS,
    tracker_config_env,
)
from tether.tracker.outputs import ENV_OUTPUTS_URL, outputs_root, outputs_url

log = logging.getLogger(__name__)

ENV_JOB_KEY = "TETHER_JOB_KEY"


def wire_env(
    app: AppDef,
    scheduler: str,
    session: str,
    config: TetherConfig,
    parent_run_id: str | None,
    job_key: str | None,
) -> None:
    """Adds the tracking environment to every role of ``app`` (in place).

    Args:
        app: The app (the Runner's own copy).
        scheduler: The scheduler's name.
        session: The Runner's session name (part of the job's handle).
        config: The ``.tetherconfig`` (outputs root, trackers).
        parent_run_id: Tracking parent run (default ``$TETHER_PARENT_RUN_ID``).
        job_key: Stable identity of the job, if any.
    """
    job_id = make_app_handle(scheduler, session, macros.app_id)
    parent = parent_run_id or os.environ.get(ENV_PARENT_RUN_ID)
    trackers = tracker_settings(config)
    out_url = outputs_url(
        outputs_root(config.section("tether:outputs").get("url")), scheduler,
        macros.app_id,
    )
    for role in app.roles:
        role.env.setdefault(ENV_JOB_ID, job_id)
        role.env.setdefault(ENV_APP_NAME, app.name)
        role.env.setdefault(ENV_OUTPUTS_URL, out_url)
        if parent:
            role.env.setdefault(ENV_PARENT_RUN_ID, parent)
        if job_key:
            role.env.setdefault(ENV_JOB_KEY, job_key)
        if trackers:
            role.env.setdefault(ENV_TRACKERS, ",".join(trackers))
            for name, conf in trackers.items():
                if conf is not None:
                    role.env.setdefault(tracker_config_env(name), conf)


def tracker_settings(config: TetherConfig) -> dict[str, str | None]:
    """The trackers a job gets, with their settings.

    ``$TETHER_TRACKERS`` (and each tracker's settings variable) wins over ``.tetherconfig``,
    so a job launched from inside a tracked job tracks the same way.

    Args:
        config: The ``.tetherconfig``.

    Returns:
        Tracker name to its settings (None: none).
    """
    env = os.environ.get(ENV_TRACKERS)
    if env:
        return {
            n: os.environ.get(tracker_config_env(n))
            for n in (x.strip() for x in env.split(","))
            if n
        }
    return config.trackers()


def warn_default_image(app: AppDef, scheduler: str, caps: Capabilities) -> None:
    """Warns when a role of ``app`` runs tether's default image on a remote backend, where
    nodes pull it from its registry (your build is not there unless you pushed it)."""
    if caps.runs_on_this_host or not caps.needs_image:
        return
    from tether.components import DEFAULT_IMAGE

    for role in app.roles:
        if role.image == DEFAULT_IMAGE:
            log.warning(
                "role %r runs tether's default image %s on %s: the nodes pull it from its "
                "registry. Build it with `make image` and push it, then set $TETHER_IMAGE "
                "to your copy (or pass it to the component's `image` argument, where it "
                "has one)", role.name, DEFAULT_IMAGE, scheduler)
