""":class:`AppRun`: the tracking handle a job uses to record its run and publish outputs.

Inside a job launched by tether::

    from tether.tracker import AppRun

    run = AppRun.run_from_env()
    run.add_metadata(lr=0.01, epochs=3)
    run.add_artifact("model", "s3://bucket/models/run-1.pt")
    run.add_output("accuracy", 0.93)  # read back by the caller: Runner.outputs(handle)

Every rank of a distributed job may do the same; they all write to one run.
"""

from __future__ import annotations

import getpass
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from tether.specs.secrets import mask_text, mask_value, secret_values
from tether.tracker.api import (
    ENV_APP_NAME,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_TRACKERS,
    Lineage,
    TrackerArtifact,
    TrackerBase,
    check_run_id,
)
from tether.tracker.outputs import ENV_OUTPUTS_URL, outputs_url, write_output
from tether.tracker.registry import build_trackers
from tether.tracker.settings import configured_outputs_root, configured_trackers

log: logging.Logger = logging.getLogger(__name__)

LOCAL_SCHEDULER = "local"
"""Scheduler part of the run id given to code that runs outside a tether job."""

_cache: dict[tuple[str | None, ...], AppRun] = {}
_cache_lock = threading.Lock()
_local_id: str | None = None


def _env_secrets() -> list[str]:
    """The values of this process's secret-looking environment variables (to mask)."""
    return secret_values([os.environ])


def local_run_id() -> str:
    """The run id of this process when it is not a tether job (the same for every call).

    Returns:
        ``local://<user>/<program>-<YYYYmmdd-HHMMSS>-<pid>``.
    """
    global _local_id
    if _local_id is None:
        prog = os.path.splitext(os.path.basename(sys.argv[0] if sys.argv else ""))[0]
        prog = "".join(c if c.isalnum() or c in "-_." else "_" for c in prog) or "python"
        try:
            user = getpass.getuser()
        except Exception:  # no user name in some containers
            user = "user"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        _local_id = f"{LOCAL_SCHEDULER}://{user}/{prog}-{stamp}-{os.getpid()}"
    return _local_id


class AppRun:
    """The run of one job, written to every configured tracker backend.

    Args:
        job_id: The run id (the app handle for tether jobs).
        backends: Tracker name to backend, or (as TorchX) a list of backends, each then named
            after its class (``FsspecTracker``, ``FsspecTracker_1`` for a second one...).
        parent_run_id: The run this job was started from, if any.
        outputs_url: Where :meth:`add_output` publishes (default ``$TETHER_OUTPUTS_URL``).
        app_name: The app's name, when known.
    """

    def __init__(
        self,
        job_id: str,
        backends: Mapping[str, TrackerBase] | Iterable[TrackerBase] | None = None,
        parent_run_id: str | None = None,
        outputs_url: str | None = None,
        app_name: str | None = None,
    ) -> None:
        check_run_id(job_id)
        self._job_id = job_id
        self._backends = _by_name(backends)
        self._parent_run_id = parent_run_id or None
        self._outputs_url = outputs_url
        self._app_name = app_name

    # ---- identity ----------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        """The run id: the app handle (``$TETHER_JOB_ID``) of a tether job."""
        return self._job_id

    @property
    def id(self) -> str:
        """Alias of :attr:`job_id`."""
        return self._job_id

    @property
    def parent_run_id(self) -> str | None:
        """The parent run (``$TETHER_PARENT_RUN_ID``), if any."""
        return self._parent_run_id

    @property
    def backends(self) -> Mapping[str, TrackerBase]:
        """The tracker backends by name (empty when tracking is off)."""
        return dict(self._backends)

    @property
    def outputs_url(self) -> str | None:
        """Where outputs are published."""
        return self._outputs_url

    @property
    def app_name(self) -> str | None:
        """The app's name (``$TETHER_APP_NAME``), when known."""
        return self._app_name

    def __repr__(self) -> str:
        return (
            f"AppRun(job_id={self._job_id!r}, parent_run_id={self._parent_run_id!r}, "
            f"backends={list(self._backends)})"
        )

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def run_from_env(cls) -> AppRun:
        """The run of the current job, from the environment tether gives every replica.

        Reads ``$TETHER_JOB_ID`` (run id), ``$TETHER_PARENT_RUN_ID`` (recorded as the run's
        source, which gives lineage), ``$TETHER_TRACKERS`` with ``$TETHER_TRACKER_<NAME>_CONFIG``
        (else ``.tetherconfig``), ``$TETHER_OUTPUTS_URL`` and ``$TETHER_APP_NAME``. Every rank of
        a distributed job may call it: the backends create the run once. Repeated calls with
        the same environment return the same object.

        Outside a tether job (no ``$TETHER_JOB_ID``) the run id is :func:`local_run_id`, the
        trackers are the configured ones or else the ``fsspec`` store at
        ``<state dir>/tracker``, and outputs go to ``<outputs root>/local/<run>``.

        Returns:
            The run.
        """
        job_id = os.environ.get(ENV_JOB_ID) or None
        key = (
            job_id,
            os.environ.get(ENV_PARENT_RUN_ID),
            os.environ.get(ENV_OUTPUTS_URL),
            os.environ.get(ENV_APP_NAME),
            os.environ.get(ENV_TRACKERS),
            *sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("TETHER_TRACKER_")),
            os.getcwd(),
        )
        with _cache_lock:
            run = _cache.get(key)
            if run is None:
                run = cls._from_env(job_id)
                _cache[key] = run
        return run

    @classmethod
    def _from_env(cls, job_id: str | None) -> AppRun:
        parent = os.environ.get(ENV_PARENT_RUN_ID) or None
        app_name = os.environ.get(ENV_APP_NAME) or None
        trackers = configured_trackers()
        out_url = os.environ.get(ENV_OUTPUTS_URL) or None
        if job_id is None:
            job_id = local_run_id()
            if not trackers:
                trackers = {"fsspec": None}
            if out_url is None:
                out_url = outputs_url(
                    configured_outputs_root(), LOCAL_SCHEDULER, job_id.rsplit("/", 1)[-1]
                )
            log.info(
                "not inside a tether job ($%s is unset): recording run %r with trackers %s; "
                "outputs go to %s", ENV_JOB_ID, job_id, ", ".join(trackers), out_url,
            )
        elif not trackers:
            log.info("no trackers configured ($%s unset): tracking is off", ENV_TRACKERS)
        run = cls(job_id, build_trackers(trackers), parent, out_url, app_name)
        for backend in run._backends.values():
            backend.ensure_run(job_id)
            if parent:
                backend.add_source(job_id, parent)
        return run

    # ---- writes ------------------------------------------------------------------------
    def add_metadata(self, **kwargs: Any) -> None:
        """Records metadata of this run in every backend.

        Secrets are masked by tether's one policy (:mod:`tether.specs.secrets`): values of
        secret-looking keys, ``--token X``-style arguments, URL passwords and the values of
        this process's secret-looking environment variables are recorded as ``****``.

        Args:
            **kwargs: Keys (letters, digits, ``_``, ``-``, ``.``) to JSON values.
        """
        masked = mask_value("", kwargs, _env_secrets())
        for backend in self._backends.values():
            backend.add_metadata(self._job_id, **masked)

    def add_artifact(
        self, name: str, path: str, metadata: Mapping[str, Any] | None = None
    ) -> None:
        """Records an artifact (a reference to a file or URL) of this run in every backend.

        Args:
            name: The artifact's name.
            path: Where it is.
            metadata: Extra facts (JSON values).
        """
        secrets = _env_secrets()
        path = mask_text(path, secrets)  # a URL's password is never recorded
        meta = mask_value("", dict(metadata), secrets) if metadata is not None else None
        for backend in self._backends.values():
            backend.add_artifact(self._job_id, name, path, meta)

    def add_source(self, source_id: str, artifact_name: str | None = None) -> None:
        """Records that this run was derived from another run (or one of its artifacts).

        Args:
            source_id: The source run.
            artifact_name: The artifact of it that was used, if any.
        """
        for backend in self._backends.values():
            backend.add_source(self._job_id, source_id, artifact_name)

    def add_progress(self, report: Mapping[str, Any]) -> None:
        """Records a progress report of this run in every backend, replacing the one before
        (:func:`tether.runtime.report` calls it for each report it writes).

        Args:
            report: ``Progress.to_dict()`` (step, total, metrics, eta_s, time, seq).
        """
        for backend in self._backends.values():
            backend.add_progress(self._job_id, report)

    def add_output(self, name: str, value: Any) -> str:
        """Publishes a small named output for the caller (``Runner.outputs(handle)``).

        Outputs are JSON documents under ``$TETHER_OUTPUTS_URL`` (see
        :mod:`tether.tracker.outputs`); a later write of the same name wins.

        Args:
            name: The output's name.
            value: A JSON-serializable value.

        Returns:
            The URL of the written document.
        """
        return write_output(name, value, url=self._outputs_url)

    # ---- reads -------------------------------------------------------------------------
    def _first(self) -> TrackerBase | None:
        return next(iter(self._backends.values()), None)

    def metadata(self) -> Mapping[str, Any]:
        """This run's metadata, from the first backend (empty when tracking is off)."""
        backend = self._first()
        return backend.metadata(self._job_id) if backend else {}

    def artifacts(self) -> Mapping[str, TrackerArtifact]:
        """This run's artifacts, from the first backend (empty when tracking is off)."""
        backend = self._first()
        return backend.artifacts(self._job_id) if backend else {}

    def lineage(self) -> Lineage:
        """This run's lineage, from the first backend."""
        backend = self._first()
        return backend.lineage(self._job_id) if backend else Lineage(self._job_id)


def _by_name(
    backends: Mapping[str, TrackerBase] | Iterable[TrackerBase] | None,
) -> dict[str, TrackerBase]:
    if backends is None:
        return {}
    if isinstance(backends, Mapping):
        return dict(backends)
    out: dict[str, TrackerBase] = {}
    for backend in backends:
        name = base = type(backend).__name__
        n = 0
        while name in out:
            n += 1
            name = f"{base}_{n}"
        out[name] = backend
    return out


def app_run_from_env() -> AppRun:
    """Shorthand for :meth:`AppRun.run_from_env`.

    Returns:
        The run.
    """
    return AppRun.run_from_env()


def clear_cache() -> None:
    """Forgets the runs :meth:`AppRun.run_from_env` returned (for tests and long processes)."""
    global _local_id
    with _cache_lock:
        _cache.clear()
    _local_id = None
