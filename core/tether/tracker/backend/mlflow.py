"""The ``mlflow`` tracker: runs in a real MLflow tracking store (mlflow-skinny is enough).

Config: ``TRACKING_URI[;experiment=NAME][;artifact_location=URI]``. The tracking URI may be
``sqlite:////abs/mlflow.db`` (recommended), ``file:///abs/mlruns`` (MLflow's file store; tether
opts into it with ``MLFLOW_ALLOW_FILE_STORE=true`` unless you set that variable yourself), a
tracking server ``http(s)://...`` or a database URL. Without a URI, ``$MLFLOW_TRACKING_URI``,
else ``sqlite:///<state dir>/mlflow/mlflow.db``.

Mapping onto MLflow:

* A tether run is an MLflow run named after the run id (the app handle), found again by its
  ``tether.run_id`` tag, so every replica of a job writes into the same MLflow run.
* The experiment is ``{experiment}`` from an app named ``{experiment}/{run}`` (as the ``dist``
  components name apps; read from ``$TETHER_APP_NAME``), else the config's ``experiment``,
  else ``tether``. Reads look in every experiment.
* Metadata are tags ``tether.md.<key>`` (JSON values; tags, unlike params, can be updated);
  a progress report's metrics are MLflow metrics at the report's step (so MLflow keeps
  their history and charts them), the latest report the tag ``tether.progress``;
  artifacts are references in tags ``tether.artifact.<digest>``; sources are tags
  ``tether.source.<digest>`` plus ``tether.child_of.<digest of the source>`` for finding
  children.

Only one MLflow run is ever created per run id: with a local store (``file:``, ``sqlite:``) the
lookup-or-create runs under a lock file next to the store; with a server, rank 0 creates the
run while the other ranks wait for it, and replicas that still raced converge on the oldest run
and delete their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

from tether.tracker.api import (
    ENV_APP_NAME,
    ENV_JOB_ID,
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
from tether.tracker.sync import exclusive_lock, is_rank0, wait_for

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

log: logging.Logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_EXPERIMENT = "tether"
TAG_RUN_ID = "tether.run_id"
TAG_APP_NAME = "tether.app_name"
TAG_MD_PREFIX = "tether.md."
TAG_ARTIFACT_PREFIX = "tether.artifact."
TAG_SOURCE_PREFIX = "tether.source."
TAG_CHILD_OF_PREFIX = "tether.child_of."
TAG_PROGRESS = "tether.progress"
CONFIG_KEYS = ("experiment", "artifact_location")
ENV_ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def experiment_from_app_name(app_name: str | None) -> str | None:
    """The experiment of an app named ``{experiment}/{run}``.

    Args:
        app_name: The app's name.

    Returns:
        The part before the last ``/``, or None when the name has no experiment part.
    """
    if not app_name or "/" not in app_name:
        return None
    exp = app_name.rsplit("/", 1)[0].strip("/")
    return exp or None


def parse_config(config: str | None) -> tuple[str | None, dict[str, str]]:
    """Splits ``TRACKING_URI[;key=value...]``.

    Args:
        config: The config string.

    Returns:
        The tracking URI (None if empty) and the options.

    Raises:
        ValueError: For an unknown option or one without ``=``.
    """
    if not config or not config.strip():
        return None, {}
    uri, *rest = config.split(";")
    opts: dict[str, str] = {}
    for item in rest:
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or key not in CONFIG_KEYS:
            raise ValueError(
                f"mlflow tracker config option {item.strip()!r} is not allowed; expected "
                f"TRACKING_URI;key=value with key one of {', '.join(CONFIG_KEYS)}"
            )
        opts[key] = val.strip()
    return uri.strip() or None, opts


def local_store_path(tracking_uri: str) -> str | None:
    """The local file or directory of a ``file:``/``sqlite:``/plain-path tracking URI.

    Args:
        tracking_uri: The URI.

    Returns:
        The path, or None for remote stores and in-memory databases.
    """
    if tracking_uri.startswith("sqlite:///"):
        path = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
        return None if not path or path == ":memory:" else path
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return tracking_uri
    return None


def _is_file_store(tracking_uri: str) -> bool:
    return not tracking_uri.startswith("sqlite:") and local_store_path(tracking_uri) is not None


def _retry_locked(fn: Callable[[], T], attempts: int = 6) -> T:
    """Runs ``fn``, retrying while SQLite reports the database as locked."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:
            if "database is locked" not in str(e) or i == attempts - 1:
                raise
            time.sleep(0.1 * 2**i)
    raise AssertionError("unreachable")


def _sources_of(tags: Mapping[str, str]) -> list[TrackerSource]:
    found: list[TrackerSource] = []
    for key, raw in sorted(tags.items()):
        if not key.startswith(TAG_SOURCE_PREFIX):
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("source_run_id"):
            found.append(TrackerSource(str(doc["source_run_id"]), doc.get("artifact_name")))
    return dedupe_sources(found)


class MLflowTracker(TrackerBase):
    """Tracker backed by an MLflow tracking store (see the module docs).

    Args:
        tracking_uri: The tracking URI.
        experiment: Experiment for runs created here (default: from ``$TETHER_APP_NAME``, else
            ``tether``).
        artifact_location: Artifact root for a newly created experiment.
        wait_timeout: Seconds a non-zero rank waits for rank 0 to create the run (remote
            stores only) before creating it itself.
        lock: Guard run creation with a lock file next to a local store (turn it off for a
            filesystem without exclusive create; rank 0 then creates, as with a server).
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str | None = None,
        artifact_location: str | None = None,
        wait_timeout: float = 120.0,
        lock: bool = True,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = (
            experiment_from_app_name(os.environ.get(ENV_APP_NAME))
            or experiment
            or DEFAULT_EXPERIMENT
        )
        self.artifact_location = artifact_location
        self.wait_timeout = wait_timeout
        store = local_store_path(tracking_uri)
        self._lock_path = (
            f"{os.path.abspath(store.rstrip('/'))}.tether-lock" if store and lock else None
        )
        self._client_obj: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._ids: dict[str, str] = {}
        if _is_file_store(tracking_uri) and ENV_ALLOW_FILE_STORE not in os.environ:
            log.info(
                "MLflow's file store (%s) is in maintenance mode; enabling it with %s=true "
                "(prefer sqlite:///... for new stores)", tracking_uri, ENV_ALLOW_FILE_STORE,
            )
            os.environ[ENV_ALLOW_FILE_STORE] = "true"

    def __repr__(self) -> str:
        return f"MLflowTracker({self.tracking_uri!r}, experiment={self.experiment_name!r})"

    # ---- mlflow plumbing ---------------------------------------------------------------
    @contextlib.contextmanager
    def _store_lock(self) -> Iterator[None]:
        if self._lock_path is None:
            yield
            return
        with exclusive_lock(self._lock_path):
            yield

    @property
    def _client(self) -> MlflowClient:
        if self._client_obj is None:
            from mlflow import MlflowClient

            store = local_store_path(self.tracking_uri)
            if store and self.tracking_uri.startswith("sqlite:"):
                os.makedirs(os.path.dirname(os.path.abspath(store)), exist_ok=True)
            with self._store_lock():  # a new SQLite store is migrated on first open
                self._client_obj = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client_obj

    def _experiment(self) -> str:
        """The id of this tracker's experiment, created if needed (call under the lock)."""
        if self._experiment_id is not None:
            return self._experiment_id
        from mlflow.exceptions import MlflowException

        client = self._client
        exp = client.get_experiment_by_name(self.experiment_name)
        if exp is None:
            try:
                eid = client.create_experiment(
                    self.experiment_name, artifact_location=self.artifact_location
                )
            except MlflowException as e:
                if getattr(e, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                    raise
                exp = client.get_experiment_by_name(self.experiment_name)
                if exp is None:
                    raise
                eid = exp.experiment_id
        elif exp.lifecycle_stage == "deleted":
            raise RuntimeError(
                f"MLflow experiment {self.experiment_name!r} is deleted; restore it "
                "(`mlflow experiments restore`) or configure another experiment"
            )
        else:
            eid = exp.experiment_id
        self._experiment_id = str(eid)
        return self._experiment_id

    def _all_experiment_ids(self) -> list[str]:
        ids: list[str] = []
        token: str | None = None
        while True:
            page = self._client.search_experiments(max_results=1000, page_token=token)
            ids.extend(e.experiment_id for e in page)
            token = page.token
            if not token:
                return ids

    def _search(self, filter_string: str) -> list[Run]:
        exp_ids = self._all_experiment_ids()
        if not exp_ids:
            return []
        out: list[Run] = []
        token: str | None = None
        while True:
            page = self._client.search_runs(
                exp_ids, filter_string=filter_string, max_results=1000, page_token=token
            )
            out.extend(page)
            token = page.token
            if not token:
                return out

    @staticmethod
    def _quote(run_id: str) -> str:
        check_run_id(run_id)
        if "'" in run_id or "\\" in run_id:
            raise ValueError(
                f"run id {run_id!r} cannot be looked up in MLflow: it contains a quote or a "
                "backslash, which MLflow search filters cannot express"
            )
        return f"'{run_id}'"

    def _find(self, run_id: str) -> Run | None:
        """The MLflow run of ``run_id``; with duplicates, the oldest (all callers agree)."""
        runs = self._search(f"tags.`{TAG_RUN_ID}` = {self._quote(run_id)}")
        if not runs:
            return None
        return min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))

    def _mlflow_id(self, run_id: str, create: bool) -> str | None:
        """The MLflow run id of a tether run; created on writes (once, see module docs)."""
        cached = self._ids.get(run_id)
        if cached is not None:
            return cached
        found = self._find(run_id)
        if found is None and create:
            found = self._create(run_id)
        if found is None:
            return None
        self._ids[run_id] = found.info.run_id
        return found.info.run_id

    def _create(self, run_id: str) -> Run:
        _ = self._client  # opened first: opening takes the same lock
        if self._lock_path is not None:
            with self._store_lock():
                return self._find(run_id) or self._new_run(run_id)
        if run_id == os.environ.get(ENV_JOB_ID) and not is_rank0():
            found = wait_for(
                lambda: self._find(run_id), self.wait_timeout, f"rank 0 to create run {run_id}"
            )
            if found is not None:
                return found
        mine = self._new_run(run_id)
        oldest = self._find(run_id)
        if oldest is not None and oldest.info.run_id != mine.info.run_id:
            log.info("run %s was created concurrently; using %s", run_id, oldest.info.run_id)
            self._client.delete_run(mine.info.run_id)
            return oldest
        return mine

    def _new_run(self, run_id: str) -> Run:
        tags = {TAG_RUN_ID: run_id}
        app_name = os.environ.get(ENV_APP_NAME)
        if app_name and os.environ.get(ENV_JOB_ID) == run_id:
            tags[TAG_APP_NAME] = app_name
        run = self._client.create_run(self._experiment(), run_name=run_id, tags=tags)
        log.info("created MLflow run %s for %s", run.info.run_id, run_id)
        return run

    def _set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        mid = self._mlflow_id(run_id, create=True)
        assert mid is not None
        batch = [RunTag(k, v) for k, v in tags.items()]
        _retry_locked(lambda: self._client.log_batch(mid, tags=batch))

    def _tags(self, run_id: str) -> dict[str, str]:
        mid = self._mlflow_id(run_id, create=False)
        if mid is None:
            return {}
        return dict(self._client.get_run(mid).data.tags)

    # ---- writes ------------------------------------------------------------------------
    def ensure_run(self, run_id: str) -> None:
        """Creates the MLflow run for ``run_id`` unless it exists (once across replicas).

        Args:
            run_id: The run.
        """
        self._quote(run_id)
        self._mlflow_id(run_id, create=True)

    def add_metadata(self, run_id: str, **kwargs: Any) -> None:
        """See :meth:`TrackerBase.add_metadata`."""
        md = check_metadata(kwargs)
        if md:
            tags = {f"{TAG_MD_PREFIX}{k}": to_json(v, f"metadata {k!r}") for k, v in md.items()}
            self._set_tags(run_id, tags)

    def add_artifact(
        self,
        run_id: str,
        name: str,
        path: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """See :meth:`TrackerBase.add_artifact` (MLflow keeps the reference, not a copy)."""
        check_artifact_name(name)
        doc = {"name": name, "path": str(path), "metadata": dict(metadata) if metadata else None}
        value = to_json(doc, f"metadata of artifact {name!r}")
        self._set_tags(run_id, {f"{TAG_ARTIFACT_PREFIX}{_digest(name)}": value})

    def add_progress(self, run_id: str, report: Mapping[str, Any]) -> None:
        """See :meth:`TrackerBase.add_progress`: each metric is logged at the report's step
        (its ``seq`` when it has none) and time; the report replaces the tag
        ``tether.progress``."""
        from mlflow.entities import Metric, RunTag

        tag = RunTag(TAG_PROGRESS, to_json(dict(report), "progress report"))
        step = report.get("step")
        step = int(step if step is not None else report.get("seq") or 0)
        stamp = int(float(report.get("time") or time.time()) * 1000)
        metrics = [Metric(str(k), float(v), stamp, step)
                   for k, v in (report.get("metrics") or {}).items()]
        mid = self._mlflow_id(run_id, create=True)
        assert mid is not None
        _retry_locked(lambda: self._client.log_batch(mid, metrics=metrics, tags=[tag]))

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        """See :meth:`TrackerBase.add_source`."""
        check_run_id(source_id)
        doc = json.dumps({"source_run_id": source_id, "artifact_name": artifact_name})
        source_key = _digest(f"{source_id}\0{artifact_name or ''}")
        self._set_tags(
            run_id,
            {
                f"{TAG_SOURCE_PREFIX}{source_key}": doc,
                f"{TAG_CHILD_OF_PREFIX}{_digest(source_id)}": "true",
            },
        )

    # ---- reads -------------------------------------------------------------------------
    def progress(self, run_id: str) -> Mapping[str, Any] | None:
        """See :meth:`TrackerBase.progress`."""
        raw = self._tags(run_id).get(TAG_PROGRESS)
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def metadata(self, run_id: str) -> Mapping[str, Any]:
        """See :meth:`TrackerBase.metadata`."""
        out: dict[str, Any] = {}
        for key, raw in sorted(self._tags(run_id).items()):
            if key.startswith(TAG_MD_PREFIX):
                try:
                    out[key[len(TAG_MD_PREFIX):]] = json.loads(raw)
                except ValueError:
                    out[key[len(TAG_MD_PREFIX):]] = raw  # set outside tether
        return out

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        """See :meth:`TrackerBase.artifacts`."""
        out: dict[str, TrackerArtifact] = {}
        for key, raw in self._tags(run_id).items():
            if not key.startswith(TAG_ARTIFACT_PREFIX):
                continue
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("name"):
                name = str(doc["name"])
                out[name] = TrackerArtifact(name, str(doc.get("path", "")), doc.get("metadata"))
        return dict(sorted(out.items()))

    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]:
        """See :meth:`TrackerBase.sources`."""
        found = _sources_of(self._tags(run_id))
        if artifact_name is not None:
            found = [s for s in found if s.artifact_name == artifact_name]
        return found

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        """See :meth:`TrackerBase.run_ids`."""
        parent = check_run_id_filters(kwargs)
        if parent is None:
            runs = self._search(f"tags.`{TAG_RUN_ID}` != ''")
        else:
            check_run_id(parent)
            runs = self._search(f"tags.`{TAG_CHILD_OF_PREFIX}{_digest(parent)}` = 'true'")
        ids = set()
        for run in runs:
            rid = run.data.tags.get(TAG_RUN_ID)
            if not rid:
                continue
            if parent is not None and not any(
                s.source_run_id == parent for s in _sources_of(run.data.tags)
            ):
                continue  # digest collision: not really a child
            ids.add(rid)
        return sorted(ids)

    def lineage(self, run_id: str) -> Lineage:
        """See :meth:`TrackerBase.lineage`."""
        return build_lineage(self, run_id)


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else ``sqlite:///<state dir>/mlflow/mlflow.db``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    from tether.util.paths import state_dir

    return f"sqlite:///{(state_dir() / 'mlflow' / 'mlflow.db').absolute()}"


def create(config: str | None) -> MLflowTracker:
    """Factory of the ``mlflow`` tracker (entry point ``tether.tracker: mlflow``).

    Args:
        config: ``TRACKING_URI[;experiment=NAME][;artifact_location=URI]`` (see module docs).

    Returns:
        The tracker.

    Raises:
        ValueError: For a malformed config.
    """
    uri, opts = parse_config(config)
    return MLflowTracker(
        uri or default_tracking_uri(),
        experiment=opts.get("experiment") or None,
        artifact_location=opts.get("artifact_location") or None,
    )
