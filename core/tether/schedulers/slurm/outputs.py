"""Where a job on a remote cluster publishes its outputs (``$TETHER_OUTPUTS_URL``).

The Runner gives every role ``TETHER_OUTPUTS_URL`` under the outputs root of the machine that
submits, and reads the outputs back from there. Over the ``ssh`` and ``rest`` transports the
job runs elsewhere, so the root must be storage both reach:

* a URL both reach (``s3://...``): used as it is;
* a path of this machine under the ``mount`` setting's ``LOCAL_DIR`` (the cluster's shared
  filesystem mounted here): the job gets the same place as the cluster sees it
  (``CLUSTER_DIR/...``), and the Runner reads it here;
* any other path of this machine: the cluster cannot see it, so outputs the job publishes
  would not come back; the dry run says so (a warning: a job that publishes none works).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from tether.schedulers.slurm.transport import TransportSettings
from tether.specs import AppDef

ENV_OUTPUTS_URL = "TETHER_OUTPUTS_URL"
"""The variable the Runner sets (``tether.tracker.outputs``, which imports the schedulers, so
it is named here rather than imported)."""

log: logging.Logger = logging.getLogger(__name__)

_FILE = "file://"


def _local_path(url: str) -> str | None:
    """The path of a ``file://`` URL or plain path; None for another scheme."""
    if url.startswith(_FILE):
        return url[len(_FILE) :]
    return None if "://" in url else url


def cluster_url(url: str, settings: TransportSettings) -> str | None:
    """The outputs URL as the cluster's nodes see it, or None when they cannot reach it.

    Args:
        url: ``TETHER_OUTPUTS_URL`` as the Runner made it.
        settings: The transport (``mount``).

    Returns:
        The URL for the job.
    """
    path = _local_path(url)
    if path is None or settings.transport == "local":
        return url
    mount = settings.mount_dirs()
    if mount is None:
        return None
    cluster_dir, local_dir = (d.rstrip("/") or "/" for d in mount)
    norm = os.path.normpath(path)
    if norm == local_dir:
        return cluster_dir
    prefix = local_dir if local_dir.endswith("/") else local_dir + "/"
    if not norm.startswith(prefix):
        return None
    return os.path.join(cluster_dir, norm[len(prefix) :])


def for_cluster(app: AppDef, settings: TransportSettings) -> AppDef:
    """``app`` with each role's ``TETHER_OUTPUTS_URL`` as the cluster sees it (see the module
    docs); ``app`` itself is not changed.

    Args:
        app: The app as the Runner prepared it.
        settings: The transport.

    Returns:
        The app to render (``app`` itself when nothing changes).
    """
    roles = []
    changed = False
    for role in app.roles:
        url = role.env.get(ENV_OUTPUTS_URL)
        there = cluster_url(url, settings) if url else url
        if url and there is None:
            log.warning(
                "%s=%s is a path of this machine, which the cluster (transport %s) does not "
                "see: outputs role %r publishes will not come back; set [tether:outputs] url "
                "(or TETHER_OUTPUTS_ROOT) to storage both reach (s3://...) or to a path under "
                "the mount setting's LOCAL_DIR", ENV_OUTPUTS_URL, url, settings.transport,
                role.name,
            )  # fmt: skip
        if there is not None and there != url:
            role = replace(role, env={**role.env, ENV_OUTPUTS_URL: there})
            changed = True
        roles.append(role)
    return replace(app, roles=roles) if changed else app
