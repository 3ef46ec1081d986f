"""Durable state of ``local_cwd`` apps: records, atomic writes, the job index, log time indexes.

Everything the scheduler knows of an app lives on disk, so ``describe``, ``log_iter``,
``cancel`` and ``list`` work from any process, also after the launching process exited.
Layout under ``$TETHER_STATE_DIR`` (default ``~/.local/state/tether``)::

    local_cwd/
      apps/<app_id>/state.json         the AppRecord (JSON), replaced atomically
      apps/<app_id>/lock               flock() taken for read-modify-write updates
      apps/<app_id>/supervisor.log     the supervisor's own output
      apps/<app_id>/logs/<role>/<k>/   default log directory of replica k of a role:
          stdout.log stderr.log        raw bytes of each stream (made by its first byte)
          combined.log                 both streams, whole lines
          *.log.idx                    time index of each log (see :class:`LogIndexWriter`)
      jobs/<sha256(job_key)>/<app_id>  empty marker files: the apps of a job key

Writers replace ``state.json`` with a temp file + :func:`os.replace`, so a reader never sees
a torn record. While the app's supervisor lives, only it writes the record; other processes
write only after they have seen the supervisor dead, under the app's lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
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

STATE_DIR_ENV = "TETHER_STATE_DIR"
"""Environment variable naming tether's state directory."""

APP_TOKEN_ENV = "TETHER_LOCAL_APPS"  # noqa: S105 (a variable name, not a secret)
"""Environment variable marking every process of a local app (``:``-separated app ids).

The launcher sets it on the supervisor, so the supervisor, every process it forks (also
before ``exec``) and every descendant of a replica carry the app's id. Recovery after a
crash finds the app's processes by it (see :mod:`tether.schedulers.local.procs`).
"""

BACKEND_DIR = "local_cwd"
RECORD_VERSION = 1
STATE_FILE = "state.json"
LOCK_FILE = "lock"
SUPERVISOR_LOG = "supervisor.log"
HOST_LOG = "supervisor-host.log"
STREAM_FILES = ("stdout.log", "stderr.log", "combined.log")
INDEX_SUFFIX = ".idx"

_APP_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,80}$")


class CorruptRecordError(ValueError):
    """An app's ``state.json`` cannot be read (corrupt, truncated or not tether's)."""


def default_state_dir() -> Path:
    """Tether's state directory: ``$TETHER_STATE_DIR`` or ``~/.local/state/tether``.

    Returns:
        The directory (not created).
    """
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.local/state/tether").expanduser()


def is_valid_app_id(app_id: str) -> bool:
    """Whether ``app_id`` has the shape of a local_cwd app id (and is safe as a file name).

    Args:
        app_id: The id.

    Returns:
        True if it may name an app.
    """
    return bool(_APP_ID.match(app_id))


# ---- atomic files ------------------------------------------------------------------------
def atomic_write_bytes(path: Path, data: bytes, fsync: bool = True) -> None:
    """Writes ``data`` to ``path`` atomically (temp file in the same directory + os.replace).

    Args:
        path: The destination.
        data: The content.
        fsync: Flush the temp file to disk before the rename.
    """
    import tempfile  # hashlib and tempfile are imported where used: not on the CLI's start

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_dir(path: Path) -> None:
    """Flushes a directory's entries (a rename in it) to disk; best effort.

    Args:
        path: The directory.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_dirs(path: Path | str) -> None:
    """Creates ``path`` and its missing parents, each new one private to the user (0700).

    Args:
        path: The directory.
    """
    p = Path(path)
    if p.is_dir():
        return
    if p.parent != p:
        private_dirs(p.parent)
    with contextlib.suppress(FileExistsError):
        p.mkdir(mode=0o700)


def encode_json(doc: Any) -> bytes:
    """``doc`` as compact UTF-8 JSON with sorted keys.

    Compact because only then does :mod:`json` use its C encoder: an indented dump of a
    32-replica record takes ten times as long, and records are written at every state
    change. ``python -m json.tool state.json`` shows one indented.

    Args:
        doc: A JSON-serializable document.

    Returns:
        The encoded document.
    """
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def atomic_write_json(path: Path, doc: Any) -> None:
    """Writes ``doc`` as JSON to ``path`` atomically.

    Args:
        path: The destination.
        doc: A JSON-serializable document.
    """
    atomic_write_bytes(path, encode_json(doc))


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


def role_from_json(doc: dict[str, Any]) -> Role:
    """Rebuilds a role written by :func:`role_to_json`.

    Args:
        doc: The JSON dict.

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
    return Role(
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


def app_from_json(doc: dict[str, Any]) -> AppDef:
    """Rebuilds an app written by :func:`app_to_json`.

    Args:
        doc: The JSON dict.

    Returns:
        The app.
    """
    return AppDef(
        name=doc["name"],
        roles=[role_from_json(r) for r in doc.get("roles", [])],
        metadata=dict(doc.get("metadata", {})),
    )


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
        retries_used: Retries consumed, by role (``role``) or replica (``role/k``).
        supervisor_pid: Pid of the app's supervisor process.
        supervisor_start_time: Kernel start time of the supervisor (pid reuse guard).
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
        known = {f.name for f in dataclasses.fields(AppRecord)}
        rep_known = {f.name for f in dataclasses.fields(ReplicaRecord)}
        fields_ = {k: v for k, v in doc.items() if k in known and k != "replicas"}
        reps = [
            ReplicaRecord(**{k: v for k, v in r.items() if k in rep_known})
            for r in doc.get("replicas", [])
        ]
        return AppRecord(**fields_, replicas=reps)


# ---- the store ---------------------------------------------------------------------------
class StateStore:
    """The ``local_cwd`` directory of tether's state dir: app records and the job index.

    Args:
        root: Tether's state directory (default :func:`default_state_dir`).
    """

    def __init__(self, root: Path | str | None = None) -> None:
        base = Path(root).expanduser() if root is not None else default_state_dir()
        self.root = base / BACKEND_DIR
        self.apps_dir = self.root / "apps"
        self.jobs_dir = self.root / "jobs"

    def ensure(self) -> None:
        """Creates the directories (private to the user: records hold role env values)."""
        for d in (self.root, self.apps_dir, self.jobs_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)

    def app_dir(self, app_id: str) -> Path:
        """The directory of an app's record."""
        if not is_valid_app_id(app_id):
            raise ValueError(f"{app_id!r} is not a local_cwd app id")
        return self.apps_dir / app_id

    def state_path(self, app_id: str) -> Path:
        """The app's ``state.json``."""
        return self.app_dir(app_id) / STATE_FILE

    def create(self, record: AppRecord) -> None:
        """Writes the first record of a new app.

        Args:
            record: The record.

        Raises:
            FileExistsError: When an app with that id exists.
        """
        self.ensure()
        d = self.app_dir(record.app_id)
        d.mkdir(mode=0o700)
        (d / LOCK_FILE).touch(mode=0o600)
        if record.job_key is not None:
            jd = self._job_dir(record.job_key)
            jd.mkdir(mode=0o700, parents=True, exist_ok=True)
            (jd / record.app_id).touch()
        self.save(record)

    def save(self, record: AppRecord, fsync: bool = False) -> None:
        """Replaces the app's record atomically.

        The rename is atomic for every reader and every crash of a process. By default the
        record is not fsync'ed (that would delay every state change by milliseconds): after
        a crash of the host, a record may be older than the app, and recovery resolves it as
        an app whose supervisor died. The supervisor fsyncs the intent and confirmation
        records around starting processes.

        Args:
            record: The record.
            fsync: Flush the record (and the rename) to disk before returning.
        """
        record.updated = time.time()
        data = encode_json(record.to_json())
        path = self.state_path(record.app_id)
        atomic_write_bytes(path, data, fsync=fsync)
        if fsync:
            fsync_dir(path.parent)

    def load(self, app_id: str) -> AppRecord | None:
        """Reads an app's record.

        Args:
            app_id: The app id.

        Returns:
            The record, or None when there is no such app.

        Raises:
            CorruptRecordError: When the file is not a record this tether reads (the message
                names the file).
        """
        if not is_valid_app_id(app_id):
            return None
        path = self.state_path(app_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CorruptRecordError(f"cannot read local_cwd record {path}: {e}") from None
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON {type(doc).__name__}, not an object")
            rec = AppRecord.from_json(doc)
            rec.app_state  # noqa: B018 (checks the state name)
            for rep in rec.replicas:
                rep.app_state  # noqa: B018
            app_from_json(rec.app)
            return rec
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            raise CorruptRecordError(
                f"local_cwd record {path} is corrupt or not tether's ({type(e).__name__}: "
                f"{str(e)[:200]}); move it away or delete its app directory"
            ) from None

    @contextlib.contextmanager
    def lock(self, app_id: str) -> Iterator[None]:
        """Holds the app's exclusive lock (for read-modify-write of its record).

        Args:
            app_id: The app id.

        Yields:
            Nothing; the lock is held inside the block.
        """
        path = self.app_dir(app_id) / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def app_ids(self) -> list[str]:
        """The ids of every recorded app."""
        try:
            names = os.listdir(self.apps_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if is_valid_app_id(n))

    def _job_dir(self, job_key: str) -> Path:
        import hashlib

        return self.jobs_dir / hashlib.sha256(job_key.encode("utf-8")).hexdigest()[:40]

    def job_app_ids(self, job_key: str) -> list[str]:
        """The ids of the apps submitted with ``job_key`` (from the job index).

        Args:
            job_key: The job identity.

        Returns:
            App ids (unordered; load the records for times).
        """
        try:
            return [n for n in os.listdir(self._job_dir(job_key)) if is_valid_app_id(n)]
        except FileNotFoundError:
            return []

    def delete(self, record: AppRecord) -> None:
        """Removes an app's record, its job index entry and its log directory.

        Args:
            record: The app's record.
        """
        if record.job_key is not None:
            jd = self._job_dir(record.job_key)
            with contextlib.suppress(FileNotFoundError):
                (jd / record.app_id).unlink()
            with contextlib.suppress(OSError):
                jd.rmdir()
        if record.log_dir:
            shutil.rmtree(record.log_dir, ignore_errors=True)
        shutil.rmtree(self.app_dir(record.app_id), ignore_errors=True)


# ---- log time indexes --------------------------------------------------------------------
_ENTRY = struct.Struct("<Qd")
INDEX_RESOLUTION_S = 0.01
"""Time resolution of the log indexes: one entry per write, at most one per 10 ms."""


class LogIndexWriter:
    """Appends ``(byte offset, time)`` entries to a log's ``.idx`` sidecar.

    An entry ``(o, t)`` says that the bytes of the log from offset ``o`` on were received at
    or after ``t``. A line's time is the time of the last entry at or before its first byte.
    Entries are written at most every :data:`INDEX_RESOLUTION_S`, so the index stays tiny
    (16 bytes per entry) even for logs of gigabytes.

    The file is created by the first entry (a log that stays empty has no index; readers
    take a missing index as an empty one), which keeps file creation off a replica's start.

    Args:
        path: The ``.idx`` file (appended to; it survives restarts of a replica).
        offset: The log's current size.
    """

    def __init__(self, path: str, offset: int) -> None:
        self._path = path
        self._fd = -1
        self.offset = offset
        self._last = -1.0

    def wrote(self, nbytes: int, now: float) -> None:
        """Records that ``nbytes`` were appended to the log at ``now``.

        Args:
            nbytes: Bytes just written.
            now: The time they were received.
        """
        if nbytes <= 0:
            return
        if now - self._last >= INDEX_RESOLUTION_S:
            if self._fd < 0:
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._fd, _ENTRY.pack(self.offset, now))
            self._last = now
        self.offset += nbytes

    def close(self) -> None:
        """Closes the index file."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def read_index(path: str, start: int = 0) -> tuple[list[tuple[int, float]], int]:
    """Reads the entries of a log index from byte ``start`` on.

    Args:
        path: The ``.idx`` file.
        start: Byte offset in the index to read from (a multiple of the entry size).

    Returns:
        The entries ``(log offset, time)`` and the index offset to continue from.
    """
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return [], start
    n = len(data) // _ENTRY.size
    entries = [_ENTRY.unpack_from(data, i * _ENTRY.size) for i in range(n)]
    return [(int(o), float(t)) for o, t in entries], start + n * _ENTRY.size
