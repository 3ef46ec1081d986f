"""Airflow Connections that say which cluster a tether task runs on (``conn_id``).

A task with ``conn_id="my_cluster"`` builds its Runner from that Connection instead of the
environment, so each task can pick its cluster. Connection types:

* ``tether_kubernetes`` (or the cncf provider's ``kubernetes``): extras
  ``kubeconfig`` / ``kube_config_path`` (a file), ``kube_config`` (the kubeconfig itself,
  written to a private 0600 file), ``in_cluster`` (the pod's service account), ``context`` /
  ``cluster_context``, ``namespace`` (where ``list`` and ``find_jobs`` look by default; the run
  option ``namespace`` still decides where a job goes).
* ``tether_local``: no settings (the local schedulers).

Example (an environment variable, as Airflow reads connections)::

    AIRFLOW_CONN_TRAINING_CLUSTER='{"conn_type": "tether_kubernetes",
        "extra": {"kubeconfig": "/etc/kube/training.yaml", "context": "gpu",
                  "namespace": "ml"}}'
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.adapters.airflow.attempts import AirflowAdapterError

CONN_TYPE_KUBERNETES = "tether_kubernetes"
CONN_TYPE_LOCAL = "tether_local"
CONN_TYPES = (CONN_TYPE_KUBERNETES, CONN_TYPE_LOCAL)
_KUBERNETES_ALIASES = (CONN_TYPE_KUBERNETES, "kubernetes")

_TRUE = ("1", "true", "yes", "on")


def _flag(value: Any) -> bool:
    return value is True or str(value).strip().lower() in _TRUE


def _kubeconfig_file(content: Any) -> str:
    """Writes an inline kubeconfig to a private file (one per content) and returns its path."""
    import json

    text = content if isinstance(content, str) else json.dumps(content)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"tether-kubeconfig-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{digest}.yaml"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    return str(path)


def params_from_connection(
    conn_id: str, conn_type: str | None, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The Runner's scheduler parameters that a Connection describes.

    Args:
        conn_id: The connection (for messages).
        conn_type: Its type.
        extra: Its extras.

    Returns:
        Keyword arguments for :func:`tether.runner.get_runner`.

    Raises:
        AirflowAdapterError: For a connection type tether does not take.
    """
    kind = (conn_type or "").strip().lower()
    if kind == CONN_TYPE_LOCAL:
        return {}
    if kind not in _KUBERNETES_ALIASES:
        raise AirflowAdapterError(
            f"conn_id {conn_id!r} has type {conn_type!r}; tether takes the connection types "
            f"{', '.join(repr(t) for t in CONN_TYPES)} (or the Kubernetes provider's "
            "'kubernetes')"
        )
    params: dict[str, Any] = {}
    context = extra.get("context") or extra.get("cluster_context")
    if _flag(extra.get("in_cluster", False)):
        if context:
            raise AirflowAdapterError(
                f"conn_id {conn_id!r}: in_cluster and context exclude each other"
            )
    elif extra.get("kube_config"):
        params["kubeconfig"] = _kubeconfig_file(extra["kube_config"])
    elif extra.get("kubeconfig") or extra.get("kube_config_path"):
        params["kubeconfig"] = str(extra.get("kubeconfig") or extra.get("kube_config_path"))
    if context:
        params["context"] = str(context)
    if extra.get("namespace"):
        params["namespace"] = str(extra["namespace"])
    return params


def scheduler_params(conn_id: str | None) -> dict[str, Any]:
    """The Runner parameters of an Airflow Connection (none without ``conn_id``).

    Args:
        conn_id: The connection id, or None.

    Returns:
        Keyword arguments for :func:`tether.runner.get_runner`.
    """
    if not conn_id:
        return {}
    from airflow.sdk import Connection

    conn = Connection.get(conn_id)
    return params_from_connection(conn_id, conn.conn_type, conn.extra_dejson or {})
