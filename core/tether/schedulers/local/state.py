"""Durable state of ``local_cwd`` apps: the layout, atomic writes, the app store and job index.

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
          *.log.idx                    time index of each log (see
                                       :class:`~tether.schedulers.local.logindex.LogIndexWriter`)
      jobs/<sha256(job_key)>/<app_id>  empty marker files: the apps of a job key

Writers replace ``state.json`` with a temp file + :func:`os.replace`, so a reader never sees
a torn record (:class:`~tether.schedulers.local.records.AppRecord`). While the app's
supervisor lives, only it writes the record; other processes write only after they have
seen the supervisor dead, under the app's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.schedulers.local.records import AppRecord

STATE_DIR_ENV = "TETHER_STATE_DIR"
"""Environment variable naming tether's state directory."""

APP_TOKEN_ENV = "TETHER_LOCAL_APPS"  # noqa: S105 (a variable name, not a secret)
"""Environment variable marking every process of a local app (``:``-separated app ids).

The launcher sets it on the supervisor, so the supervisor, every process it forks (also
before ``exec``) and every descendant of a replica carry the app's id. Recovery after a
crash finds the app's processes by it (see :mod:`tether.schedulers.local.procs`).
"""

SUPERVISOR_NAME = b"tether-sup"
"""The process name (``comm``) of a supervisor forked by the supervisor host (its command
line is the host's); recovery finds such a supervisor's unexec'ed forks by it."""

BACKEND_DIR = "local_cwd"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
SUPERVISOR_LOG = "supervisor.log"
HOST_LOG = "supervisor-host.log"
STREAM_FILES = ("stdout.log", "stderr.log", "combined.log")
INDEX_SUFFIX = ".idx"

_APP_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,80}$")


class CorruptRecordError(TetherError, ValueError):
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

    The temp file is private (0600), made with ``O_EXCL`` under a random name (not
    :mod:`tempfile`, whose import costs every forked supervisor), so concurrent writers, also
    in other pid namespaces sharing the directory, never touch each other's.

    Args:
        path: The destination.
        data: The content.
        fsync: Flush the temp file to disk before the rename.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:  # 48 random bits taken: another name
            continue
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
    p = os.fspath(path)
    try:  # one system call in the common cases (it exists; only its last part is missing)
        os.mkdir(p, 0o700)
        return
    except FileExistsError:
        return
    except FileNotFoundError:
        parent = os.path.dirname(p.rstrip(os.sep))
        if not parent or parent == p:
            raise
    private_dirs(parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(p, 0o700)


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

    def sync(self, app_id: str) -> None:
        """Flushes the app's record as it stands (and its rename) to disk.

        ``save(record)`` then ``sync`` is as durable as ``save(record, fsync=True)`` once
        ``sync`` returns, while other processes see the record from the rename on: the
        supervisor publishes its claim that way and makes it durable before it starts a
        replica. A record replaced meanwhile (by a cancel) is flushed instead: it was written
        from the claimed one.

        Args:
            app_id: The app.

        Raises:
            OSError: When the record cannot be opened or flushed.
        """
        path = self.state_path(app_id)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
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
        from tether.schedulers.local.records import AppRecord, check_app_json

        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON {type(doc).__name__}, not an object")
            rec = AppRecord.from_json(doc)
            rec.app_state  # noqa: B018 (checks the state name)
            for rep in rec.replicas:
                rep.app_state  # noqa: B018
            check_app_json(rec.app)
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
        import shutil

        if record.log_dir:
            shutil.rmtree(record.log_dir, ignore_errors=True)
        shutil.rmtree(self.app_dir(record.app_id), ignore_errors=True)
