"""Reading tracked runs back: what ``tether tracker list ...`` shows.

Each function reads the configured trackers (``$TETHER_TRACKERS`` /
``TETHER_TRACKER_<NAME>_CONFIG``, else ``.tetherconfig``); with several trackers, results are
merged and the first configured tracker wins on conflicts. Errors are one line each:
:class:`TrackerNotConfiguredError` when no tracker is configured, :class:`UnknownRunError` and
:class:`UnknownArtifactError` (with close matches) for names that do not exist.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from tether.errors import NotFoundError, TetherError
from tether.tracker.api import (
    ENV_TRACKERS,
    Lineage,
    TrackerArtifact,
    TrackerBase,
    tracker_config_env,
)
from tether.tracker.registry import build_trackers
from tether.tracker.settings import configured_trackers


class TrackerNotConfiguredError(TetherError, RuntimeError):
    """No tracker is configured; the message says how to configure one (one line)."""

    def __init__(self) -> None:
        from tether.tracker.backend.fsspec import default_url

        super().__init__(
            f"no tracker configured: set {ENV_TRACKERS} (e.g. {ENV_TRACKERS}=fsspec "
            f"TETHER_TRACKER_FSSPEC_CONFIG={default_url()}) or add a [tether:tracker] section "
            "with [tracker:<name>] config = ... to .tetherconfig"
        )


class UnknownRunError(NotFoundError):
    """The run id is not known to the configured trackers (message: one line)."""


class UnknownArtifactError(NotFoundError):
    """The run has no artifact of that name (message: one line, with the available ones)."""


def tracker_backends() -> dict[str, TrackerBase]:
    """The configured tracker backends.

    Returns:
        Name to backend.

    Raises:
        TrackerNotConfiguredError: When none is configured.
    """
    trackers = configured_trackers()
    if not trackers:
        raise TrackerNotConfiguredError()
    return build_trackers(trackers)


def trackers_from_environ() -> list[TrackerBase]:
    """The tracker backends the environment names (TorchX's ``trackers_from_environ``):
    ``$TETHER_TRACKERS`` with each one's ``$TETHER_TRACKER_<NAME>_CONFIG``.

    Returns:
        The backends, in the order named; empty when ``$TETHER_TRACKERS`` is unset or empty.

    Raises:
        UnknownTrackerError: For a name that is neither registered nor ``module:function``.
    """
    names = [n.strip() for n in os.environ.get(ENV_TRACKERS, "").split(",") if n.strip()]
    configs = {n: os.environ.get(tracker_config_env(n)) or None for n in names}
    return list(build_trackers(configs).values())


def _all_run_ids(backends: Mapping[str, TrackerBase]) -> list[str]:
    ids: set[str] = set()
    for backend in backends.values():
        ids.update(backend.run_ids())
    return sorted(ids)


def _check_known(backends: Mapping[str, TrackerBase], run_id: str) -> None:
    known = _all_run_ids(backends)
    if run_id in known:
        return
    close = difflib.get_close_matches(run_id, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownRunError(
        f"run {run_id!r} is not in tracker(s) {', '.join(backends)}{hint} "
        "(`tether tracker list jobs` lists the runs)"
    )


def list_jobs(parent_run_id: str | None = None) -> list[str]:
    """The tracked runs, or the children of one run.

    Args:
        parent_run_id: Only the runs that have this run as a source.

    Returns:
        Run ids, sorted.

    Raises:
        TrackerNotConfiguredError: When no tracker is configured.
    """
    backends = tracker_backends()
    if parent_run_id is None:
        return _all_run_ids(backends)
    ids: set[str] = set()
    for backend in backends.values():
        ids.update(backend.run_ids(parent_run_id=parent_run_id))
    return sorted(ids)


def list_metadata(run_id: str) -> Mapping[str, Any]:
    """The metadata of a run.

    Args:
        run_id: The run.

    Returns:
        Key to value, sorted by key.

    Raises:
        TrackerNotConfiguredError: When no tracker is configured.
        UnknownRunError: When no tracker knows the run.
    """
    backends = tracker_backends()
    out: dict[str, Any] = {}
    for backend in backends.values():
        for key, value in backend.metadata(run_id).items():
            out.setdefault(key, value)
    if not out:
        _check_known(backends, run_id)
    return dict(sorted(out.items()))


def list_artifacts(run_id: str, artifact: str | None = None) -> Mapping[str, TrackerArtifact]:
    """The artifacts of a run.

    Args:
        run_id: The run.
        artifact: Only the artifact with this name.

    Returns:
        Name to artifact, sorted by name.

    Raises:
        TrackerNotConfiguredError: When no tracker is configured.
        UnknownRunError: When no tracker knows the run.
        UnknownArtifactError: When ``artifact`` is given and the run has none of that name.
    """
    backends = tracker_backends()
    found: dict[str, TrackerArtifact] = {}
    for backend in backends.values():
        for name, art in backend.artifacts(run_id).items():
            found.setdefault(name, art)
    if not found:
        _check_known(backends, run_id)
    if artifact is None:
        return dict(sorted(found.items()))
    if artifact not in found:
        close = difflib.get_close_matches(artifact, list(found), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        have = ", ".join(sorted(found)) or "none"
        raise UnknownArtifactError(
            f"run {run_id!r} has no artifact {artifact!r}{hint} (its artifacts: {have})"
        )
    return {artifact: found[artifact]}


def lineage(run_id: str) -> Lineage:
    """The lineage of a run: its parent chain and its children, with their artifacts.

    Args:
        run_id: The run.

    Returns:
        The lineage from the first tracker that has any for the run.

    Raises:
        TrackerNotConfiguredError: When no tracker is configured.
        UnknownRunError: When no tracker knows the run and it has no children.
    """
    backends = tracker_backends()
    first: Lineage | None = None
    for backend in backends.values():
        lin = backend.lineage(run_id)
        if not lin.is_empty():
            return lin
        first = first or lin
    _check_known(backends, run_id)
    return first or Lineage(run_id)


# ---- the tree ------------------------------------------------------------------------------
_Node = tuple[str, list[Any]]


def _artifact_nodes(lin: Lineage) -> list[_Node]:
    if not lin.artifacts:
        return []
    arts: list[_Node] = [(f"{n}: {a.path}", []) for n, a in sorted(lin.artifacts.items())]
    return [("artifacts", arts)]


def _parent_nodes(lin: Lineage) -> list[_Node]:
    nodes = _artifact_nodes(lin)
    if lin.parents:
        nodes.append(("parents", [_parent(p) for p in lin.parents]))
    return nodes


def _parent(lin: Lineage) -> _Node:
    label = lin.run_id + (f"  (used: {', '.join(lin.via_artifacts)})" if lin.via_artifacts else "")
    return (label, _parent_nodes(lin))


def _child_nodes(lin: Lineage) -> list[_Node]:
    nodes = _artifact_nodes(lin)
    if lin.children:
        nodes.append(("children", [(c.run_id, _child_nodes(c)) for c in lin.children]))
    return nodes


def _render(nodes: Iterable[_Node], prefix: str, out: list[str]) -> None:
    items = list(nodes)
    for i, (label, sub) in enumerate(items):
        last = i == len(items) - 1
        out.append(f"{prefix}{'└── ' if last else '├── '}{label}")
        _render(sub, prefix + ("    " if last else "│   "), out)


def format_lineage_tree(lineage: Lineage) -> str:
    """Renders a lineage as a text tree.

    The run is the root; below it its ``artifacts`` (``name: path``), its ``parents`` (each
    with the artifacts of it that were used, and its own parents further up) and its
    ``children`` (each with its artifacts and its own children)::

        local_cwd://tether/train-x1
        ├── artifacts
        │   └── model: /data/model.pt
        ├── parents
        │   └── airflow://etl/run-7
        └── children
            └── local_cwd://tether/eval-y2

    Args:
        lineage: The lineage.

    Returns:
        The tree (no trailing newline).
    """
    nodes = _artifact_nodes(lineage)
    if lineage.parents:
        nodes.append(("parents", [_parent(p) for p in lineage.parents]))
    if lineage.children:
        nodes.append(("children", [(c.run_id, _child_nodes(c)) for c in lineage.children]))
    out = [lineage.run_id]
    _render(nodes, "", out)
    return "\n".join(out)
