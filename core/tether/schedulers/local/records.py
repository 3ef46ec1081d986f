"""The record of a ``local_cwd`` app (``state.json``): what the scheduler keeps of it.

:class:`AppRecord` holds the app (its AppDef as JSON), its state and one
:class:`ReplicaRecord` per replica: the command line, environment, log files, pid and start
time of the replica's current attempt. :class:`~tether.schedulers.local.state.StateStore`
reads and writes records; the supervisor is their only writer while it lives.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from tether.specs import (
    AppDef,
    AppState,
    BindMount,
    DeviceMount,
    Mount,
    Resource,
    RetryPolicy,
    Role,
    SecretRef,
    VolumeMount,
)
from tether.specs.app import check_app_fields
from tether.specs.checks import raise_type_problems
from tether.specs.trusted import unchecked_app, unchecked_role

RECORD_VERSION = 1
"""Version of the record format; a record of another version is not read."""
APP_RETRIES_KEY = ""
"""The key of ``AppRecord.retries_used`` counting the app's ``APPLICATION`` restarts (no role
has an empty name)."""

# ---- AppDef <-> JSON ---------------------------------------------------------------------
_MOUNT_TYPES: dict[str, type[Any]] = {
    "bind": BindMount,
    "volume": VolumeMount,
    "device": DeviceMount,
}


def _mount_to_json(m: Mount) -> dict[str, Any]:
    kind = next(k for k, t in _MOUNT_TYPES.items() if isinstance(m, t))
    return {"type": kind, **dataclasses.asdict(m)}


def _jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it, else its ``str`` (metadata may hold arbitrary objects)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def role_to_json(role: Role) -> dict[str, Any]:
    """A JSON form of a role (see :func:`role_from_json`).

    Args:
        role: The role.

    Returns:
        A JSON-serializable dict.
    """
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": list(role.args),
        "env": dict(role.env),
        # references only: the values are read at launch and never written here
        "secrets": {k: {"name": r.name, "key": r.key} for k, r in role.secrets.items()},
        "num_replicas": role.num_replicas,
        "min_replicas": role.min_replicas,
        "max_retries": role.max_retries,
        "retry_policy": RetryPolicy(role.retry_policy).value,
        "resource": _jsonable(dataclasses.asdict(role.resource)),
        "port_map": dict(role.port_map),
        "mounts": [_mount_to_json(m) for m in role.mounts],
        "workspace": dict(role.workspace.projects) if role.workspace is not None else None,
        "metadata": {k: _jsonable(v) for k, v in role.metadata.items()},
    }


def role_from_json(doc: dict[str, Any], check: bool = True) -> Role:
    """Rebuilds a role written by :func:`role_to_json`.

    Args:
        doc: The JSON dict.
        check: Check the fields as ``Role(...)`` does (raising its errors); False only for
            a document found valid before (see :func:`check_app_json`).

    Returns:
        The role.
    """
    mounts: list[Mount] = []
    for m in doc.get("mounts", []):
        m = dict(m)
        mounts.append(_MOUNT_TYPES[m.pop("type")](**m))
    workspace = None
    if doc.get("workspace") is not None:
        from tether.workspace.api import Workspace

        workspace = Workspace(dict(doc["workspace"]))
    values = dict(
        name=doc["name"],
        image=doc.get("image", ""),
        entrypoint=doc.get("entrypoint", ""),
        args=list(doc.get("args", [])),
        env=dict(doc.get("env", {})),
        secrets={
            k: SecretRef(str(r["name"]), str(r.get("key", "")))
            for k, r in dict(doc.get("secrets", {})).items()
        },
        num_replicas=int(doc.get("num_replicas", 1)),
        min_replicas=doc.get("min_replicas"),
        max_retries=int(doc.get("max_retries", 0)),
        retry_policy=RetryPolicy(doc.get("retry_policy", RetryPolicy.APPLICATION.value)),
        resource=Resource(**doc["resource"]) if "resource" in doc else Resource(-1, -1, -1),
        port_map=dict(doc.get("port_map", {})),
        mounts=mounts,
        workspace=workspace,
        metadata=dict(doc.get("metadata", {})),
    )
    return Role(**values) if check else unchecked_role(**values)


def app_to_json(app: AppDef) -> dict[str, Any]:
    """A JSON form of an app (see :func:`app_from_json`).

    Args:
        app: The app.

    Returns:
        A JSON-serializable dict.
    """
    return {
        "name": app.name,
        "roles": [role_to_json(r) for r in app.roles],
        "metadata": {k: _jsonable(v) for k, v in app.metadata.items()},
    }


def app_from_json(doc: dict[str, Any], check: bool = True) -> AppDef:
    """Rebuilds an app written by :func:`app_to_json`.

    Args:
        doc: The JSON dict.
        check: Check the fields as the ``AppDef`` and ``Role`` constructors do (raising
            their errors; each role is checked once); False only for a document found
            valid before (see :func:`check_app_json`).

    Returns:
        The app.
    """
    name = doc["name"]
    roles = [role_from_json(r, check) for r in doc.get("roles", [])]
    app = unchecked_app(name=name, roles=roles, metadata=dict(doc.get("metadata", {})))
    if check:  # the roles were checked as they were built
        raise_type_problems(check_app_fields(app), "AppDef")
    return app


_VALID_APP_DOCS: dict[str, None] = {}
"""The app documents :func:`check_app_json` found valid, as canonical JSON text."""
_VALID_APP_DOCS_MAX = 256


def check_app_json(doc: dict[str, Any]) -> None:
    """Checks that :func:`app_from_json` rebuilds an app from ``doc``.

    A record keeps its app document unchanged for its whole life, and is read again at
    every ``describe``: a document equal to one found valid before (the same canonical JSON
    text) is not rebuilt again. The verdict depends on the document alone, so a record
    rewritten with another app is checked afresh.

    Args:
        doc: The app's JSON document (``AppRecord.app``).

    Raises:
        ValueError, TypeError, KeyError, AttributeError, IndexError: What
            :func:`app_from_json` raises for ``doc``.
    """
    try:
        key = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON (records are): check it, remember nothing
        app_from_json(doc)
        return
    if key in _VALID_APP_DOCS:
        return
    app_from_json(doc)
    if len(_VALID_APP_DOCS) >= _VALID_APP_DOCS_MAX:
        _VALID_APP_DOCS.clear()
    _VALID_APP_DOCS[key] = None


# ---- records -----------------------------------------------------------------------------
@dataclass
class ReplicaRecord:
    """What is known of one replica.

    Attributes:
        role: The role's name.
        replica_id: The replica's index within the role.
        argv: The command (macros substituted).
        env: Variables set on top of the launcher's environment.
        cwd: Working directory.
        stdout: Path of the stdout log.
        stderr: Path of the stderr log.
        combined: Path of the combined log.
        state: AppState name of the replica.
        pid: Pid of the current (or last) attempt; also its process group id.
        start_time: Kernel start time of ``pid`` (clock ticks since boot), guarding against
            pid reuse.
        exit_code: Exit code of the last attempt (negative: killed by that signal).
        attempts: How many times the replica was started.
        started_at: Start of the last attempt (seconds since the epoch).
        finished_at: End of the last attempt.
        msg: Why it failed, when it did.
        dropped_log_bytes: Log output lost because it could not be written (a full disk).
        launching: Intent: the supervisor is about to start (another attempt of) this
            replica; written durably before the process is forked, cleared once its pid is.
    """

    role: str
    replica_id: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdout: str
    stderr: str
    combined: str
    state: str = AppState.PENDING.name
    pid: int | None = None
    start_time: int | None = None
    exit_code: int | None = None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    msg: str = ""
    launching: bool = False
    dropped_log_bytes: int = 0

    @property
    def app_state(self) -> AppState:
        """The replica's state as an AppState."""
        return AppState[self.state]

    def log_path(self, stream: str) -> str:
        """The log file of ``stream`` (``stdout``, ``stderr`` or ``combined``)."""
        return str(getattr(self, stream))


@dataclass
class AppRecord:
    """Everything the scheduler keeps of an app (``state.json``).

    Attributes:
        app_id: The app's id.
        name: The app's name.
        session: The runner session that submitted it.
        created: Submission time (seconds since the epoch).
        job_key: The caller's job identity (``app.metadata[JOB_KEY]``), if any.
        app: The AppDef as JSON (:func:`app_to_json`).
        cfg: The resolved run options.
        log_dir: The app's log directory.
        grace_period: Seconds between SIGTERM and SIGKILL when stopping processes.
        state: AppState name of the app.
        msg: Why it failed or was cancelled.
        num_restarts: Restarts performed so far.
        retries_used: Retries consumed, by role (``role``), replica (``role/k``) or, for
            ``APPLICATION`` roles, the app (:data:`APP_RETRIES_KEY`).
        supervisor_pid: Pid of the app's supervisor process.
        supervisor_start_time: Kernel start time of the supervisor (pid reuse guard).
        supervisor_sid: The supervisor's session id: the session is the app's alone (its
            leader, the supervisor's first fork, exited), and every replica stays in it.
        supervisor_log: Path of the supervisor's own log.
        launcher_pid: Pid of the process that submitted the app (it starts the supervisor).
        launcher_start_time: Kernel start time of the launcher (pid reuse guard).
        finished_at: When the app reached a final state.
        updated: Time of the last write.
        replicas: One record per replica, role by role.
        version: Format version of the record.
    """

    app_id: str
    name: str
    session: str
    created: float
    job_key: str | None
    app: dict[str, Any]
    cfg: dict[str, Any]
    log_dir: str
    grace_period: float
    state: str = AppState.SUBMITTED.name
    msg: str = ""
    num_restarts: int = 0
    retries_used: dict[str, int] = field(default_factory=dict)
    supervisor_pid: int | None = None
    supervisor_start_time: int | None = None
    supervisor_sid: int | None = None
    supervisor_log: str = ""
    launcher_pid: int | None = None
    launcher_start_time: int | None = None
    finished_at: float | None = None
    updated: float = 0.0
    replicas: list[ReplicaRecord] = field(default_factory=list)
    version: int = RECORD_VERSION

    @property
    def app_state(self) -> AppState:
        """The app's state as an AppState."""
        return AppState[self.state]

    def replica(self, role: str, k: int) -> ReplicaRecord | None:
        """Replica ``k`` of ``role``, or None."""
        for r in self.replicas:
            if r.role == role and r.replica_id == k:
                return r
        return None

    def role_names(self) -> list[str]:
        """The role names, in app order."""
        out: list[str] = []
        for r in self.replicas:
            if r.role not in out:
                out.append(r.role)
        return out

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON document.

        A shallow view for the encoder (not a deep copy): the dicts it holds are the record's
        own, so it is serialized at once, not kept.
        """
        doc = dict(vars(self))
        doc["replicas"] = [dict(vars(r)) for r in self.replicas]
        return doc

    @staticmethod
    def from_json(doc: dict[str, Any]) -> AppRecord:
        """Reads a record written by :meth:`to_json`.

        Args:
            doc: The JSON document.

        Returns:
            The record.

        Raises:
            ValueError: For a document of an unknown version.
        """
        version = doc.get("version", RECORD_VERSION)
        if version != RECORD_VERSION:
            raise ValueError(
                f"local_cwd state record of app {doc.get('app_id')!r} has version {version}; "
                f"this tether reads version {RECORD_VERSION}"
            )
        fields_ = {k: v for k, v in doc.items() if k in _RECORD_FIELDS and k != "replicas"}
        reps = [
            ReplicaRecord(**{k: v for k, v in r.items() if k in _REPLICA_FIELDS})
            for r in doc.get("replicas", [])
        ]
        return AppRecord(**fields_, replicas=reps)


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(AppRecord))
_REPLICA_FIELDS = frozenset(f.name for f in dataclasses.fields(ReplicaRecord))
