"""The tracker interface every backend implements, and the records it deals in.

A *run* is identified by a string run id. For jobs launched by tether the run id is the app
handle (``$TETHER_JOB_ID``, e.g. ``local_cwd://tether/train-x1y2``), so every replica of a job
writes into the same run. A run holds:

* metadata: key/value pairs (JSON values; the last write of a key wins),
* artifacts: named references to files or URLs, each with optional metadata,
* sources: the runs (and optionally the artifacts of them) it was derived from. A job started
  with a parent run id records that parent as a source, which is what gives pipelines their
  lineage: a run's parents are its sources, its children the runs that name it as a source.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# the environment contract lives in tether.tracker.env; re-exported here, where it always was
from tether.tracker.env import ENV_APP_NAME as ENV_APP_NAME
from tether.tracker.env import ENV_JOB_ID as ENV_JOB_ID
from tether.tracker.env import ENV_PARENT_RUN_ID as ENV_PARENT_RUN_ID
from tether.tracker.env import ENV_TRACKERS as ENV_TRACKERS
from tether.tracker.env import tracker_config_env as tracker_config_env

FILTER_PARENT_RUN_ID = "parent_run_id"
RUN_ID_FILTERS = (FILTER_PARENT_RUN_ID,)
"""The filters :meth:`TrackerBase.run_ids` accepts."""

_METADATA_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


@dataclass(frozen=True)
class TrackerSource:
    """A run (and optionally one of its artifacts) that another run was derived from.

    Attributes:
        source_run_id: The source run.
        artifact_name: The artifact of the source run that was used, if one was named.
    """

    source_run_id: str
    artifact_name: str | None = None


@dataclass(frozen=True)
class TrackerArtifact:
    """A named reference to something a run produced (a file, a directory, a URL).

    Attributes:
        name: The artifact's name, unique within its run.
        path: Where it is (a local path or any URL); the tracker stores the reference.
        metadata: Extra facts about it (JSON values).
    """

    name: str
    path: str
    metadata: Mapping[str, Any] | None = None


@dataclass
class Lineage:
    """A run with its ancestry and descendants.

    Parent nodes carry their own ``parents`` (the chain upwards) and no children; child nodes
    carry their own ``children`` (downwards) and no parents.

    Attributes:
        run_id: The run.
        artifacts: Its artifacts.
        parents: The runs it was derived from.
        children: The runs derived from it.
        via_artifacts: On a parent node: the artifacts of that parent the run below used.
    """

    run_id: str
    artifacts: Mapping[str, TrackerArtifact] = field(default_factory=dict)
    parents: list[Lineage] = field(default_factory=list)
    children: list[Lineage] = field(default_factory=list)
    via_artifacts: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        """True when the run has no artifacts, parents or children on record."""
        return not (self.artifacts or self.parents or self.children)


class TrackerBase(abc.ABC):
    """A tracking backend: stores metadata, artifacts and sources of runs.

    Backends are created by a factory ``(config: str | None) -> TrackerBase`` registered in
    the ``tether.tracker`` entry-point group (see :mod:`tether.tracker.registry`). Every write
    method may be called concurrently from many processes (all replicas of a job) for the same
    run; backends must not lose writes or create duplicate runs when that happens.
    """

    # ---- writes ------------------------------------------------------------------------
    @abc.abstractmethod
    def add_artifact(
        self,
        run_id: str,
        name: str,
        path: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Records an artifact of a run (a later artifact with the same name replaces it).

        Args:
            run_id: The run.
            name: The artifact's name.
            path: Where it is.
            metadata: Extra facts (JSON values).
        """

    @abc.abstractmethod
    def add_metadata(self, run_id: str, **kwargs: Any) -> None:
        """Records metadata of a run (keys already present are overwritten).

        Args:
            run_id: The run.
            **kwargs: Keys (letters, digits, ``_``, ``-``, ``.``) to JSON values.
        """

    @abc.abstractmethod
    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        """Records that a run was derived from another run (or one of its artifacts).

        Args:
            run_id: The run.
            source_id: The run it was derived from.
            artifact_name: The artifact of ``source_id`` it used, if any.
        """

    # ---- reads -------------------------------------------------------------------------
    @abc.abstractmethod
    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        """The artifacts of a run by name (empty for an unknown run).

        Args:
            run_id: The run.

        Returns:
            Name to artifact.
        """

    @abc.abstractmethod
    def metadata(self, run_id: str) -> Mapping[str, Any]:
        """The metadata of a run (empty for an unknown run).

        Args:
            run_id: The run.

        Returns:
            Key to value.
        """

    @abc.abstractmethod
    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]:
        """The sources of a run.

        Args:
            run_id: The run.
            artifact_name: Only the sources that name this artifact.

        Returns:
            The sources, without duplicates.
        """

    @abc.abstractmethod
    def lineage(self, run_id: str) -> Lineage:
        """The run's parent chain and its children (see :func:`build_lineage`).

        Args:
            run_id: The run.

        Returns:
            The lineage.
        """

    @abc.abstractmethod
    def run_ids(self, **kwargs: str) -> Iterable[str]:
        """The runs this backend knows.

        Args:
            **kwargs: Filters; ``parent_run_id=X`` keeps the runs that have ``X`` as a source.

        Returns:
            The run ids.

        Raises:
            ValueError: For an unknown filter.
        """

    # ---- optional ----------------------------------------------------------------------
    def ensure_run(self, run_id: str) -> None:  # noqa: B027 - optional hook, no-op default
        """Makes sure the run exists, so it is listed even before anything is written.

        Safe to call from every replica at once. The default does nothing.

        Args:
            run_id: The run.
        """

    def add_progress(self, run_id: str, report: Mapping[str, Any]) -> None:  # noqa: B027
        """Records a progress report of the run (:func:`tether.runtime.report`), replacing
        the one before it. The default records nothing.

        Args:
            run_id: The run.
            report: ``Progress.to_dict()``: ``step``, ``total``, ``metrics`` (name to
                number), ``eta_s``, ``time`` (seconds since the epoch) and ``seq``.
        """

    def progress(self, run_id: str) -> Mapping[str, Any] | None:
        """The run's latest progress report (as given to :meth:`add_progress`).

        Args:
            run_id: The run.

        Returns:
            The report, or None when the run recorded none (always None by default).
        """
        return None


def check_run_id(run_id: str) -> None:
    """Rejects run ids that cannot name a run.

    Args:
        run_id: The run id.

    Raises:
        ValueError: When it is empty, too long or holds control characters.
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"run id {run_id!r} is empty; pass an app handle or another run id")
    if len(run_id) > 500 or any(ord(c) < 32 for c in run_id):
        raise ValueError(
            f"run id {run_id[:80]!r} is not allowed: use at most 500 printable characters"
        )


def check_run_id_filters(kwargs: Mapping[str, Any]) -> str | None:
    """Validates the filters of :meth:`TrackerBase.run_ids`.

    Args:
        kwargs: The filters.

    Returns:
        The ``parent_run_id`` filter, if given.

    Raises:
        ValueError: For an unknown filter, naming the allowed ones.
    """
    unknown = sorted(set(kwargs) - set(RUN_ID_FILTERS))
    if unknown:
        raise ValueError(
            f"unknown run_ids filter(s) {', '.join(unknown)}; allowed: {', '.join(RUN_ID_FILTERS)}"
        )
    parent = kwargs.get(FILTER_PARENT_RUN_ID)
    return str(parent) if parent is not None else None


def check_metadata(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Validates metadata keys and values the same way for every backend.

    Args:
        kwargs: Key to value.

    Returns:
        The metadata as a plain dict.

    Raises:
        ValueError: For a bad key or a value that is not JSON-serializable.
    """
    for key, value in kwargs.items():
        if not _METADATA_KEY.match(key):
            raise ValueError(
                f"metadata key {key!r} is not allowed: use 1-200 letters, digits, '_', '-' "
                "or '.'"
            )
        to_json(value, f"metadata {key!r}")
    return dict(kwargs)


def check_artifact_name(name: str) -> None:
    """Rejects artifact names that are empty, too long or hold control characters.

    Args:
        name: The name.

    Raises:
        ValueError: When it is not allowed.
    """
    if not name or len(name) > 250 or any(ord(c) < 32 for c in name):
        raise ValueError(
            f"artifact name {name!r} is not allowed: use 1-250 printable characters"
        )


def to_json(value: Any, what: str) -> str:
    """Serializes ``value`` to JSON with a clear error.

    Args:
        value: The value.
        what: What it is, for the error message.

    Returns:
        The JSON text.

    Raises:
        ValueError: When it is not JSON-serializable.
    """
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{what} is not JSON-serializable ({e}); use str, int, float, bool, None, lists "
            "and dicts of those"
        ) from None


def dedupe_sources(sources: Iterable[TrackerSource]) -> list[TrackerSource]:
    """Sources without duplicates, in first-seen order.

    Args:
        sources: The sources.

    Returns:
        The unique ones.
    """
    seen: dict[TrackerSource, None] = {}
    for s in sources:
        seen.setdefault(s, None)
    return list(seen)


def build_lineage(tracker: TrackerBase, run_id: str, max_depth: int = 32) -> Lineage:
    """Computes a run's lineage from a backend's sources and ``run_ids(parent_run_id=...)``.

    Backends implement :meth:`TrackerBase.lineage` with this unless they can do better.

    Args:
        tracker: The backend.
        run_id: The run.
        max_depth: How many levels to follow up and down (cycles are cut).

    Returns:
        The lineage.
    """

    def up(rid: str, depth: int, seen: frozenset[str]) -> list[Lineage]:
        if depth >= max_depth:
            return []
        by_parent: dict[str, list[str]] = {}
        for src in tracker.sources(rid):
            names = by_parent.setdefault(src.source_run_id, [])
            if src.artifact_name and src.artifact_name not in names:
                names.append(src.artifact_name)
        out = []
        for parent, via in by_parent.items():
            if parent in seen:
                continue
            out.append(
                Lineage(
                    run_id=parent,
                    artifacts=dict(tracker.artifacts(parent)),
                    parents=up(parent, depth + 1, seen | {parent}),
                    via_artifacts=via,
                )
            )
        return out

    def down(rid: str, depth: int, seen: frozenset[str]) -> list[Lineage]:
        if depth >= max_depth:
            return []
        out = []
        for child in sorted(set(tracker.run_ids(parent_run_id=rid))):
            if child in seen:
                continue
            out.append(
                Lineage(
                    run_id=child,
                    artifacts=dict(tracker.artifacts(child)),
                    children=down(child, depth + 1, seen | {child}),
                )
            )
        return out

    start = frozenset({run_id})
    return Lineage(
        run_id=run_id,
        artifacts=dict(tracker.artifacts(run_id)),
        parents=up(run_id, 0, start),
        children=down(run_id, 0, start),
    )
