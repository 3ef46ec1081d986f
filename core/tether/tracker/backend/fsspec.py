"""The ``fsspec`` tracker: runs stored as small JSON files under any fsspec URL.

Config: the store's URL (a local directory, ``memory://name``, ``s3://bucket/prefix``, ...);
default ``<state dir>/tracker``. Layout under the URL::

    runs/<run>/run.json                 {"run_id", "created"}: created once, exclusively
    runs/<run>/metadata/<t>-<uid>.json  one add_metadata call: {"key": value, ...}
    runs/<run>/artifacts/<t>-<uid>.json one add_artifact call: {"name", "path", "metadata"}
    runs/<run>/sources/<digest>.json    {"source_run_id", "artifact_name"} (idempotent)
    runs/<run>/progress.json            the latest progress report, replaced by each one
    children/<parent>/<run>             reverse index of sources: the run id, for lineage

``<run>`` is the run id with every character other than letters, digits, ``_`` and ``-``
percent-encoded (ids whose encoding is too long for a file name are shortened and end in
``~<hash>``; the id is then read from ``run.json``). ``<t>`` is the write time in nanoseconds,
``<uid>`` random: every write is its own file, so any number of replicas can write the same
run at once without locks or lost updates, and reads merge the files in time order (the
last write of a metadata key or artifact name wins). On local filesystems each file is written
under a hidden temporary name and renamed into place, so readers never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from tether.errors import SpecError
from tether.tracker.api import (
    Lineage,
    TrackerArtifact,
    TrackerBase,
    TrackerSource,
    build_lineage,
    check_artifact_name,
    check_metadata,
    check_run_id,
    check_run_id_filters,
    dedupe_sources,
    to_json,
)

log: logging.Logger = logging.getLogger(__name__)

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_NAME = 200
_RUN_FILE = "run.json"
_PROGRESS_FILE = "progress.json"


def encode_run_id(run_id: str) -> str:
    """The file name of a run id (see the module docs).

    Args:
        run_id: The run id.

    Returns:
        A name safe on every filesystem and object store.
    """
    enc = "".join(
        c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in run_id
    )
    if len(enc) <= _MAX_NAME:
        return enc
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:20]
    return f"{enc[:150]}~{digest}"


def decode_run_id(name: str) -> str | None:
    """The run id of a file name made by :func:`encode_run_id`.

    Args:
        name: The file name.

    Returns:
        The run id, or None for a shortened name (read the id from the file instead).
    """
    if "~" in name:
        return None
    from urllib.parse import unquote

    return unquote(name)


def _stamp() -> str:
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.json"


class FsspecTracker(TrackerBase):
    """Tracker that stores runs as JSON files under an fsspec URL (see the module docs).

    Args:
        url: The store's URL, or (as TorchX) an fsspec filesystem object.
        root_path: With a filesystem object: the store's path on it (required then).

    Raises:
        SpecError: (a ``ValueError``) When a filesystem object comes without ``root_path``.
    """

    def __init__(self, url: str | Any, root_path: str | None = None) -> None:
        import fsspec

        if isinstance(url, str):
            fs, root = fsspec.core.url_to_fs(url)
            self.url = url
        else:  # TorchX's FsspecTracker(fs, root_path)
            if not root_path:
                raise SpecError(
                    "FsspecTracker(fs, root_path): root_path is required with a filesystem "
                    "object (the directory of the store on it)"
                )
            fs, root = url, root_path
            proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            self.url = f"{proto}://{root_path}" if proto not in ("file", "local") else root_path
        self._fs = fs
        self._root = root.rstrip("/")
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self._local = "file" in protocols or "local" in protocols
        self._ensured: set[str] = set()

    def __repr__(self) -> str:
        return f"FsspecTracker({self.url!r})"

    # ---- paths -------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self._root, *parts]) if self._root else "/".join(parts)

    def _run_dir(self, run_id: str, *parts: str) -> str:
        return self._path("runs", encode_run_id(run_id), *parts)

    # ---- low-level io ------------------------------------------------------------------
    def _put(self, path: str, data: str) -> None:
        parent = path.rsplit("/", 1)[0]
        self._fs.makedirs(parent, exist_ok=True)
        if self._local:
            tmp = f"{parent}/.{uuid.uuid4().hex}.tmp"
            self._fs.pipe_file(tmp, data.encode())
            self._fs.mv(tmp, path)
        else:
            self._fs.pipe_file(path, data.encode())

    def _create_once(self, path: str, data: str) -> None:
        """Writes ``path`` unless it exists; the first of concurrent writers wins."""
        if self._fs.exists(path):
            return
        self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        try:
            with self._fs.open(path, "xb") as f:
                f.write(data.encode())
        except FileExistsError:
            pass
        except (ValueError, NotImplementedError):
            # this filesystem has no exclusive create; the content is the same for every
            # writer of the same run, so a plain write is equivalent
            self._fs.pipe_file(path, data.encode())

    def _names(self, directory: str) -> list[str]:
        """Sorted base names of the visible entries of ``directory`` (empty if missing)."""
        try:
            self._fs.invalidate_cache(directory)
            entries = self._fs.ls(directory, detail=False)
        except FileNotFoundError:
            return []
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and not n.startswith("."))

    def _read_docs(self, directory: str) -> list[dict[str, Any]]:
        """The JSON documents of ``directory`` in file-name (write-time) order."""
        paths = [f"{directory}/{n}" for n in self._names(directory) if n.endswith(".json")]
        if not paths:
            return []
        raw: Mapping[str, bytes] = self._fs.cat(paths, on_error="omit")
        by_name = {p.rstrip("/").rsplit("/", 1)[-1]: v for p, v in raw.items()}
        docs = []
        for name in sorted(by_name):
            try:
                doc = json.loads(by_name[name])
            except ValueError:
                log.warning("skipping unreadable tracker file %s/%s", directory, name)
                continue
            if isinstance(doc, dict):
                docs.append(doc)
        return docs

    def _read_run_id(self, path: str) -> str | None:
        """The ``run_id`` field of a JSON file (for shortened names), or None."""
        try:
            doc = json.loads(self._fs.cat_file(path))
        except (FileNotFoundError, ValueError):
            return None
        return str(doc["run_id"]) if isinstance(doc, dict) and "run_id" in doc else None

    # ---- writes ------------------------------------------------------------------------
    def ensure_run(self, run_id: str) -> None:
        """Creates the run's record once (safe from many replicas at once).

        Args:
            run_id: The run.
        """
        check_run_id(run_id)
        if run_id in self._ensured:
            return
        doc = json.dumps({"run_id": run_id, "created": time.time()})
        self._create_once(self._run_dir(run_id, _RUN_FILE), doc)
        self._ensured.add(run_id)

    def add_metadata(self, run_id: str, **kwargs: Any) -> None:
        """See :meth:`TrackerBase.add_metadata`."""
        md = check_metadata(kwargs)
        self.ensure_run(run_id)
        if md:
            self._put(self._run_dir(run_id, "metadata", _stamp()), to_json(md, "metadata"))

    def add_progress(self, run_id: str, report: Mapping[str, Any]) -> None:
        """See :meth:`TrackerBase.add_progress` (one file, replaced: no history)."""
        data = to_json(dict(report), "progress report")
        self.ensure_run(run_id)
        self._put(self._run_dir(run_id, _PROGRESS_FILE), data)

    def add_artifact(
        self,
        run_id: str,
        name: str,
        path: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """See :meth:`TrackerBase.add_artifact`."""
        check_artifact_name(name)
        doc = {"name": name, "path": str(path), "metadata": dict(metadata) if metadata else None}
        data = to_json(doc, f"metadata of artifact {name!r}")
        self.ensure_run(run_id)
        self._put(self._run_dir(run_id, "artifacts", _stamp()), data)

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        """See :meth:`TrackerBase.add_source`."""
        check_run_id(source_id)
        self.ensure_run(run_id)
        key = hashlib.sha256(f"{source_id}\0{artifact_name or ''}".encode()).hexdigest()[:32]
        doc = json.dumps({"source_run_id": source_id, "artifact_name": artifact_name})
        self._create_once(self._run_dir(run_id, "sources", f"{key}.json"), doc)
        marker = self._path("children", encode_run_id(source_id), encode_run_id(run_id))
        self._create_once(marker, json.dumps({"run_id": run_id}))

    # ---- reads -------------------------------------------------------------------------
    def metadata(self, run_id: str) -> Mapping[str, Any]:
        """See :meth:`TrackerBase.metadata`."""
        out: dict[str, Any] = {}
        for doc in self._read_docs(self._run_dir(run_id, "metadata")):
            out.update(doc)
        return out

    def progress(self, run_id: str) -> Mapping[str, Any] | None:
        """See :meth:`TrackerBase.progress`."""
        try:
            doc = json.loads(self._fs.cat_file(self._run_dir(run_id, _PROGRESS_FILE)))
        except (FileNotFoundError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        """See :meth:`TrackerBase.artifacts`."""
        out: dict[str, TrackerArtifact] = {}
        for doc in self._read_docs(self._run_dir(run_id, "artifacts")):
            name = str(doc.get("name", ""))
            if name:
                out[name] = TrackerArtifact(name, str(doc.get("path", "")), doc.get("metadata"))
        return out

    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]:
        """See :meth:`TrackerBase.sources`."""
        found = [
            TrackerSource(str(d["source_run_id"]), d.get("artifact_name"))
            for d in self._read_docs(self._run_dir(run_id, "sources"))
            if "source_run_id" in d
        ]
        if artifact_name is not None:
            found = [s for s in found if s.artifact_name == artifact_name]
        return dedupe_sources(found)

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        """See :meth:`TrackerBase.run_ids`; ``parent_run_id`` reads the reverse index."""
        parent = check_run_id_filters(kwargs)
        if parent is not None:
            directory = self._path("children", encode_run_id(parent))
            ids = [
                decode_run_id(n) or self._read_run_id(f"{directory}/{n}")
                for n in self._names(directory)
            ]
        else:
            directory = self._path("runs")
            ids = [
                decode_run_id(n) or self._read_run_id(f"{directory}/{n}/{_RUN_FILE}")
                for n in self._names(directory)
            ]
        return sorted({i for i in ids if i})

    def lineage(self, run_id: str) -> Lineage:
        """See :meth:`TrackerBase.lineage`."""
        return build_lineage(self, run_id)


def default_url() -> str:
    """The store used when the ``fsspec`` tracker has no config: ``<state dir>/tracker``."""
    from tether.util.paths import state_dir

    return str(state_dir() / "tracker")


def read_config_file(path: str) -> dict[str, str]:
    """Reads TorchX's fsspec tracker config file: ``key=value`` lines, ``#`` comments.

    Args:
        path: The file.

    Returns:
        Its keys and values, stripped.
    """
    data: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.strip().startswith("#") and value.strip():
                data[key.strip()] = value.strip()
    return data


def create(config: str | None) -> FsspecTracker:
    """Factory of the ``fsspec`` tracker (entry point ``tether.tracker: fsspec``).

    Args:
        config: As TorchX, a config file of ``key=value`` lines: ``protocol`` (an fsspec
            protocol such as ``file`` or ``s3``) and ``root_path`` (the store's path) are
            required, any other key is passed to ``fsspec.filesystem``. Else the store's
            fsspec URL or local directory (default ``<state dir>/tracker``).

    Returns:
        The tracker.

    Raises:
        SpecError: (a ``ValueError``) When a config file lacks ``protocol`` or ``root_path``.
    """
    url = (config or "").strip() or default_url()
    if "://" not in url:
        url = os.path.abspath(os.path.expanduser(url))
        if os.path.isfile(url):
            return _from_config_file(url)
    return FsspecTracker(url)


def _from_config_file(path: str) -> FsspecTracker:
    import fsspec

    options = read_config_file(path)
    missing = [k for k in ("protocol", "root_path") if k not in options]
    if missing:
        raise SpecError(
            f"fsspec tracker config {path!r}: missing {', '.join(missing)} (it needs "
            f"protocol=<fsspec protocol> and root_path=<directory of the store>; "
            f"found {sorted(options) or 'no keys'})"
        )
    protocol, root = options.pop("protocol"), options.pop("root_path")
    return FsspecTracker(fsspec.filesystem(protocol, **options), root)
