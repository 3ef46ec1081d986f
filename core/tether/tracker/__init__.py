"""Tracking: metadata, artifacts, sources and lineage of runs, and job outputs.

Inside a job, :meth:`AppRun.run_from_env` gives the run of the job (its id is the app handle,
``$TETHER_JOB_ID``) writing to the backends named by ``$TETHER_TRACKERS`` (or
``.tetherconfig``). Backends implement :class:`TrackerBase` and are registered in the
``tether.tracker`` entry-point group; ``fsspec`` and ``mlflow`` are built in. Outside a job,
:func:`list_jobs`, :func:`list_metadata`, :func:`list_artifacts`, :func:`lineage` and
:func:`format_lineage_tree` read the runs back (``tether tracker list ...``).

Importing this package imports no backend, fsspec or MLflow, and none of its modules: each name
is imported on first use (the Runner, and so every CLI command, imports this package).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.tracker.api import (
        ENV_APP_NAME,
        ENV_JOB_ID,
        ENV_PARENT_RUN_ID,
        ENV_TRACKERS,
        Lineage,
        TrackerArtifact,
        TrackerBase,
        TrackerSource,
        build_lineage,
        tracker_config_env,
    )
    from tether.tracker.app_run import AppRun, app_run_from_env
    from tether.tracker.outputs import ENV_OUTPUTS_URL, read_outputs, write_output
    from tether.tracker.query import (
        TrackerNotConfiguredError,
        UnknownArtifactError,
        UnknownRunError,
        format_lineage_tree,
        lineage,
        list_artifacts,
        list_jobs,
        list_metadata,
        tracker_backends,
        trackers_from_environ,
    )
    from tether.tracker.registry import (
        BUILTIN_TRACKERS,
        ENTRY_POINT_GROUP,
        TrackerRegistryError,
        UnknownTrackerError,
        build_trackers,
        get_tracker_factories,
        get_tracker_factory,
    )
    from tether.tracker.settings import configured_trackers

_EXPORTS: dict[str, str] = {
    "ENV_APP_NAME": "tether.tracker.api",
    "ENV_JOB_ID": "tether.tracker.api",
    "ENV_PARENT_RUN_ID": "tether.tracker.api",
    "ENV_TRACKERS": "tether.tracker.api",
    "Lineage": "tether.tracker.api",
    "TrackerArtifact": "tether.tracker.api",
    "TrackerBase": "tether.tracker.api",
    "TrackerSource": "tether.tracker.api",
    "build_lineage": "tether.tracker.api",
    "tracker_config_env": "tether.tracker.api",
    "AppRun": "tether.tracker.app_run",
    "app_run_from_env": "tether.tracker.app_run",
    "ENV_OUTPUTS_URL": "tether.tracker.outputs",
    "read_outputs": "tether.tracker.outputs",
    "write_output": "tether.tracker.outputs",
    "TrackerNotConfiguredError": "tether.tracker.query",
    "UnknownArtifactError": "tether.tracker.query",
    "UnknownRunError": "tether.tracker.query",
    "format_lineage_tree": "tether.tracker.query",
    "lineage": "tether.tracker.query",
    "list_artifacts": "tether.tracker.query",
    "list_jobs": "tether.tracker.query",
    "list_metadata": "tether.tracker.query",
    "tracker_backends": "tether.tracker.query",
    "trackers_from_environ": "tether.tracker.query",
    "BUILTIN_TRACKERS": "tether.tracker.registry",
    "ENTRY_POINT_GROUP": "tether.tracker.registry",
    "TrackerRegistryError": "tether.tracker.registry",
    "UnknownTrackerError": "tether.tracker.registry",
    "build_trackers": "tether.tracker.registry",
    "get_tracker_factories": "tether.tracker.registry",
    "get_tracker_factory": "tether.tracker.registry",
    "configured_trackers": "tether.tracker.settings",
}


def __getattr__(name: str) -> Any:
    """Imports an exported name's module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "BUILTIN_TRACKERS",
    "ENTRY_POINT_GROUP",
    "ENV_APP_NAME",
    "ENV_JOB_ID",
    "ENV_OUTPUTS_URL",
    "ENV_PARENT_RUN_ID",
    "ENV_TRACKERS",
    "AppRun",
    "Lineage",
    "TrackerArtifact",
    "TrackerBase",
    "TrackerNotConfiguredError",
    "TrackerRegistryError",
    "TrackerSource",
    "UnknownArtifactError",
    "UnknownRunError",
    "UnknownTrackerError",
    "app_run_from_env",
    "build_lineage",
    "build_trackers",
    "configured_trackers",
    "format_lineage_tree",
    "get_tracker_factories",
    "get_tracker_factory",
    "lineage",
    "list_artifacts",
    "list_jobs",
    "list_metadata",
    "read_outputs",
    "tracker_backends",
    "tracker_config_env",
    "trackers_from_environ",
    "write_output",
]
