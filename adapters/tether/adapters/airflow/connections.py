"""Airflow Connections that say which cluster a tether task runs on (``conn_id``).

A task with ``conn_id="my_cluster"`` builds its Runner from that Connection instead of the
environment, so each task can pick its cluster. Connection types:

* ``tether_kubernetes`` (or the cncf provider's ``kubernetes``): extras
  ``kubeconfig`` / ``kube_config_path`` (a file), ``kube_config`` (the kubeconfig itself,
  written to a private 0600 file), ``in_cluster`` (the pod's service account), ``context`` /
  ``cluster_context``, ``namespace`` (where ``list`` and ``find_jobs`` look by default; the run
  option ``namespace`` still decides where a job goes).
* ``tether_slurm``: where the cluster is reached, in three forms (the ``slurm`` transports):

  - local: host empty, ``local`` or ``localhost`` (and no login, port or key): Slurm's
    commands run on the Airflow worker (a Slurm login or submit host);
  - ssh (another host, as Airflow's SSH connection): host, port, login, and the key as the
    extra ``key_file`` (a path) or ``private_key`` (the key itself, written to a private 0600
    file); extras ``host_key`` (the login node's public host key, ``ssh-ed25519 AAAA...``;
    default: the worker's known_hosts), ``no_host_key_check`` (off by default),
    ``jump_host``, ``known_hosts``. A password is refused: OpenSSH runs non-interactively,
    so use a key;
  - rest (extra ``transport: rest``, or a host given as ``http(s)://...``): slurmrestd at
    ``rest_url`` (else the host as a URL, with the port), login = the Slurm user, password =
    the JWT (a secret, never printed); extras ``jwt_file``, ``tls_verify``, ``ca_file``,
    ``mount`` (``CLUSTER_DIR=LOCAL_DIR``: where the worker mounts the cluster's shared
    filesystem, for logs, delete and workspaces).

  Extras for all: ``slurm_conf`` (the cluster's ``slurm.conf``; default: Slurm's own lookup)
  and ``partition`` / ``job_dir`` (run options when the task's ``cfg`` sets none; a remote
  transport needs ``job_dir``).
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
from dataclasses import dataclass, field
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


def _private_file(kind: str, content: str, suffix: str = "") -> str:
    """Writes ``content`` to a private 0600 file (one per content) and returns its path."""
    digest = hashlib.sha256(content.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"tether-{kind}-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{digest}{suffix}"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(content if content.endswith("\n") else content + "\n")
    return str(path)


@dataclass(frozen=True)
class ConnectionFields:
    """The standard fields of an Airflow Connection (besides its type and extras).

    Attributes:
        host: Host (or a URL).
        port: Port.
        login: Login (user).
        password: Password (a secret: the JWT of the rest form).
        schema: Schema (``https`` / ``http`` for the rest form).
    """

    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None


def _slurm_rest(conn_id: str, fields: ConnectionFields, extra: Mapping[str, Any]) -> dict[str, Any]:
    url = str(extra.get("rest_url") or "")
    if not url:
        host = (fields.host or "").strip()
        if not host:
            raise AirflowAdapterError(
                f"conn_id {conn_id!r}: a rest tether_slurm connection needs the extra rest_url "
                "or a host (slurmrestd's URL, e.g. https://slurm.example:6820)"
            )
        if "://" not in host:
            host = f"{fields.schema or 'https'}://{host}"
        url = host + (f":{fields.port}" if fields.port and host.count(":") < 2 else "")
    params: dict[str, Any] = {"transport": "rest", "rest_url": url}
    if fields.login:
        params["user"] = fields.login
    if fields.password:
        params["jwt"] = fields.password
    for key in ("jwt_file", "ca_file", "mount"):
        if extra.get(key):
            params[key] = str(extra[key])
    if "tls_verify" in extra:
        params["tls_verify"] = _flag(extra["tls_verify"])
    return params


def _slurm_ssh(conn_id: str, fields: ConnectionFields, extra: Mapping[str, Any]) -> dict[str, Any]:
    if fields.password and not (extra.get("key_file") or extra.get("private_key")):
        raise AirflowAdapterError(
            f"conn_id {conn_id!r}: a password login is not supported by tether's ssh transport "
            "(OpenSSH runs non-interactively); give the extra key_file (a path) or private_key "
            "(the key itself), and leave the password empty"
        )
    params: dict[str, Any] = {"transport": "ssh", "host": str(fields.host).strip()}
    if fields.port:
        params["port"] = int(fields.port)
    if fields.login:
        params["user"] = fields.login
    if extra.get("private_key"):
        params["identity_file"] = _private_file("sshkey", str(extra["private_key"]))
    elif extra.get("key_file"):
        params["identity_file"] = str(extra["key_file"])
    if extra.get("host_key"):
        where = params["host"] if not fields.port else f"[{params['host']}]:{fields.port}"
        params["known_hosts"] = _private_file("knownhosts", f"{where} {extra['host_key']}")
    elif extra.get("known_hosts"):
        params["known_hosts"] = str(extra["known_hosts"])
    if _flag(extra.get("no_host_key_check", False)):
        params["verify_host_key"] = False
    for key in ("jump_host",):
        if extra.get(key):
            params[key] = str(extra[key])
    return params


def _slurm_params(
    conn_id: str, fields: ConnectionFields, extra: Mapping[str, Any]
) -> dict[str, Any]:
    host = (fields.host or "").strip()
    kind = str(extra.get("transport") or "").strip().lower()
    if not kind:
        if host.startswith(("http://", "https://")) or extra.get("rest_url"):
            kind = "rest"
        else:  # this machine, unless ssh settings say to log in (to it, too)
            login = fields.login or fields.port or extra.get("key_file") or extra.get("private_key")
            kind = "local" if host.lower() in LOCAL_HOSTS and not login else "ssh"
    if kind not in ("local", "ssh", "rest"):
        raise AirflowAdapterError(
            f"conn_id {conn_id!r}: extra transport={extra.get('transport')!r} is not allowed; "
            "allowed: local, ssh, rest"
        )
    if kind == "ssh" and host.lower() in ("", "local"):
        raise AirflowAdapterError(
            f"conn_id {conn_id!r}: transport ssh needs a host (the Slurm login node)"
        )
    params: dict[str, Any] = {}
    if kind == "rest":
        params = _slurm_rest(conn_id, fields, extra)
    elif kind == "ssh":
        params = _slurm_ssh(conn_id, fields, extra)
    if extra.get("slurm_conf"):
        params["slurm_conf"] = str(extra["slurm_conf"])
    return params


def params_from_connection(
    conn_id: str,
    conn_type: str | None,
    extra: Mapping[str, Any],
    host: str | None = None,
    fields: ConnectionFields | None = None,
) -> dict[str, Any]:
    """The Runner's scheduler parameters that a Connection describes.

    Args:
        conn_id: The connection (for messages).
        conn_type: Its type.
        extra: Its extras.
        host: Its host (``tether_slurm``: where Slurm's commands run).
        fields: Its host, port, login, password and schema (``host`` then is ignored).

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
        return _slurm_params(conn_id, fields or ConnectionFields(host=host), extra)
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
        Run option name to value (``tether_slurm``: ``partition``, ``job_dir``).
    """
    kind = (conn_type or "").strip().lower()
    if kind != CONN_TYPE_SLURM:
        return {}
    return {k: str(extra[k]) for k in ("partition", "job_dir") if extra.get(k)}


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
    fields = ConnectionFields(
        host=conn.host, port=conn.port, login=conn.login, password=conn.password,
        schema=conn.schema,
    )  # fmt: skip
    return (
        params_from_connection(conn_id, conn.conn_type, extra, fields=fields),
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
