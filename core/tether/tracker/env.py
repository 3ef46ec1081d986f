"""The environment contract between the Runner and a job's tracking: variable names only.

The Runner sets these on every role; :mod:`tether.tracker.app_run` reads them inside the job.
Kept apart from :mod:`tether.tracker.api` (the tracker interface and its records) so that
launching a job does not load the tracking model.
"""

from __future__ import annotations

ENV_JOB_ID = "TETHER_JOB_ID"
"""The job's app handle: the run id its replicas write to."""
ENV_PARENT_RUN_ID = "TETHER_PARENT_RUN_ID"
"""The run the job was derived from (its lineage parent), when there is one."""
ENV_TRACKERS = "TETHER_TRACKERS"
"""Comma-separated names of the trackers the job writes to."""
ENV_APP_NAME = "TETHER_APP_NAME"
"""The app's name."""


def tracker_config_env(name: str) -> str:
    """The env var holding a tracker's config: ``TETHER_TRACKER_<NAME>_CONFIG``.

    Args:
        name: The tracker's name (``-`` and ``.`` become ``_``).

    Returns:
        The variable name.
    """
    return f"TETHER_TRACKER_{name.upper().replace('-', '_').replace('.', '_')}_CONFIG"
