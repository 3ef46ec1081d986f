"""Airflow Connections that say which cluster a tether task runs on (``conn_id``).

A task with ``conn_id="my_cluster"`` builds its Runner from that Connection instead of the
environment, so each task can pick its cluster. Connection types:

* ``tether_kubernetes`` (or the cncf provider's ``kubernetes``): extras
  ``kubeconfig`` / ``kube_config_path`` (a file), ``kube_config`` (the kubeconfig itself,
  written to a private 0600 file), ``in_cluster`` (the pod's service account), ``context`` /
  ``cluster_context``, ``namespace`` (where ``list`` and ``find_jobs`` look by default; the run
  option ``namespace`` still decides where a job goes).
* ``tether_slurm``: Slurm's commands run on the Airflow worker (a Slurm login or
  submit host). Host: empty, ``local`` or ``localhost`` (tether has no SSH transport: a
  remote host is refused, with what to do instead). Extras ``slurm_conf`` (the cluster's
  ``slurm.conf``, so each task can pick its cluster; default: Slurm's own lookup) and
  ``partition`` (the ``partition`` run option when the task's ``cfg`` sets none).
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
CONN_TYPE_SLURM = "tether_slurm"
CONN_TYPES = (CONN_TYPE_KUBERNETES, CONN_TYPE_SLURM, CONN_TYPE_LOCAL)
LOCAL_HOSTS = ("", "local", "localhost", "127.0.0.1")
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


def _slurm_params(conn_id: str, host: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    where = (host or "").strip().lower()
    if where not in LOCAL_HOSTS:
        raise AirflowAdapterError(
            f"conn_id {conn_id!r}: host={host!r} is not allowed for a tether_slurm connection: "
            "tether runs Slurm's commands (sbatch, squeue, scancel) on the Airflow worker; "
            "leave host empty (or 'local') and run the worker on a Slurm submit host, with "
            "the extra 'slurm_conf' naming the cluster's slurm.conf"
        )
    params: dict[str, Any] = {}
    if extra.get("slurm_conf"):
        params["slurm_conf"] = str(extra["slurm_conf"])
    return params


def params_from_connection(
    conn_id: str, conn_type: str | None, extra: Mapping[str, Any], host: str | None = None
) -> dict[str, Any]:
    """The Runner's scheduler parameters that a Connection describes.

    Args:
        conn_id: The connection (for messages).
        conn_type: Its type.
        extra: Its extras.
        host: Its host (``tether_slurm``: where Slurm's commands run).

    Returns:
        Keyword arguments for :func:`tether.runner.get_runner`.

    Raises:
        AirflowAdapterError: For a connection type tether does not take, or settings it
            cannot use.
    """
    kind = (conn_type or "").strip().lower()
    if kind == CONN_TYPE_LOCAL:
        return {}
    if kind == CONN_TYPE_SLURM:
        return _slurm_params(conn_id, host, extra)
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


def cfg_from_connection(conn_type: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """Run options a Connection sets by default (a task's own ``cfg`` wins).

    Args:
        conn_type: The connection's type.
        extra: Its extras.

    Returns:
        Run option name to value (``tether_slurm``: ``partition``).
    """
    kind = (conn_type or "").strip().lower()
    if kind == CONN_TYPE_SLURM and extra.get("partition"):
        return {"partition": str(extra["partition"])}
    return {}


def merge_run_defaults(cfg: dict[str, Any], opts: Any, defaults: Mapping[str, Any]) -> None:
    """Adds default run options the scheduler takes and ``cfg`` does not set.

    Args:
        cfg: The task's run options (changed in place; its own entries win).
        opts: The scheduler's :class:`~tether.specs.runopts`.
        defaults: Option name to value (from the connection, the operator's ``job_ttl``).
    """
    for name, value in defaults.items():
        if value is not None and name in opts and cfg.get(name) is None:
            cfg[name] = value


def connection_settings(conn_id: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Runner parameters and default run options of an Airflow Connection.

    Args:
        conn_id: The connection id, or None (then both are empty).

    Returns:
        ``(runner_params, cfg_defaults)``: keyword arguments for
        :func:`tether.runner.get_runner`, and run options the task's ``cfg`` may override.
    """
    if not conn_id:
        return {}, {}
    from airflow.sdk import Connection

    conn = Connection.get(conn_id)
    extra = conn.extra_dejson or {}
    return (
        params_from_connection(conn_id, conn.conn_type, extra, conn.host),
        cfg_from_connection(conn.conn_type, extra),
    )


def scheduler_params(conn_id: str | None) -> dict[str, Any]:
    """The Runner parameters of an Airflow Connection (none without ``conn_id``).

    Args:
        conn_id: The connection id, or None.

    Returns:
        Keyword arguments for :func:`tether.runner.get_runner`.
    """
    return connection_settings(conn_id)[0]
