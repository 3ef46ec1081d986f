"""A KFP native step's ``Metrics`` artifact, written by :func:`tether.runtime.report` itself.

A native KFP step's pod is the job: KFP starts it and tether is not in the loop, so nothing
outside the job can copy its reports into the step (a launcher step does that:
:mod:`tether.adapters.kfp.metrics`). A native step compiled with
``KubernetesOptions(metrics=True)`` has the output artifact ``tether_metrics`` and starts its
command with ``env`` and two variables KFP fills in when the step starts:

* ``$TETHER_KFP_METRICS_PATH``: the local path of the artifact's file;
* ``$TETHER_KFP_EXECUTOR_INPUT``: the step's executor input (KFP's ``{{$}}``), which holds the
  artifact (its name, type and URI) and the path of the executor output file.

Each report written then also replaces the artifact's file (the report as JSON) and the
artifact's entry in the executor output file (its metadata: the report's scalars, see
:meth:`~tether.tracker.progress.Progress.scalars`; other entries of the file are kept). KFP
reads that file when the container exits and records the metadata as the artifact's, which
the run's UI shows as the step's metrics. Writes are atomic (a reader, or a kill, sees the
previous report or the new one). Without the two variables nothing here runs; a file that
cannot be written is logged once and never fails the job.

Nothing here imports KFP.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.tracker.progress import Progress

log = logging.getLogger(__name__)

ARTIFACT = "tether_metrics"
"""The name of the step's ``Metrics`` output artifact (launcher steps have it too)."""

ENV_METRICS_PATH = "TETHER_KFP_METRICS_PATH"
"""The local path of the artifact's file (KFP's ``{{$.outputs.artifacts[...].path}}``)."""

ENV_EXECUTOR_INPUT = "TETHER_KFP_EXECUTOR_INPUT"
"""The step's executor input as JSON (KFP's ``{{$}}``)."""


@dataclass(frozen=True)
class KfpMetrics:
    """Where one native step's ``Metrics`` artifact is written.

    Attributes:
        path: The artifact's file.
        output_file: KFP's executor output file.
        artifact: The artifact's entry of the executor input (name, type, URI, metadata).
    """

    path: str
    output_file: str
    artifact: Mapping[str, Any]

    @classmethod
    def from_values(cls, path: str, executor_input: str) -> KfpMetrics | None:
        """The target the two variables name, or None (logged) when they do not name one.

        Args:
            path: ``$TETHER_KFP_METRICS_PATH``.
            executor_input: ``$TETHER_KFP_EXECUTOR_INPUT``.

        Returns:
            The target.
        """
        try:
            outputs = json.loads(executor_input).get("outputs") or {}
            entries = outputs.get("artifacts", {}).get(ARTIFACT, {}).get("artifacts") or []
            output_file = outputs.get("outputFile")
        except (ValueError, AttributeError) as e:
            log.warning("$%s is not KFP's executor input (%s): progress reports do not reach "
                        "the step's %s artifact", ENV_EXECUTOR_INPUT, e, ARTIFACT)
            return None
        if not entries or not isinstance(entries[0], dict) or not output_file:
            log.warning("$%s names no output artifact %s or no output file: progress reports "
                        "do not reach the step's metrics", ENV_EXECUTOR_INPUT, ARTIFACT)
            return None
        return cls(path=path, output_file=str(output_file), artifact=dict(entries[0]))

    def write(self, progress: Progress) -> None:
        """Makes the artifact hold ``progress`` (its file and its metadata).

        Args:
            progress: The report.

        Raises:
            OSError: When a file cannot be written.
        """
        _replace_json(self.path, progress.to_dict())
        doc = _read_json(self.output_file)
        entry = {**self.artifact, "metadata": progress.scalars()}
        artifacts = doc.get("artifacts")
        if not isinstance(artifacts, dict):
            artifacts = doc["artifacts"] = {}
        artifacts[ARTIFACT] = {"artifacts": [entry]}
        _replace_json(self.output_file, doc)


class KfpMetricsSink:
    """The step's artifact as this process's environment names it, read once per value."""

    def __init__(self) -> None:
        self._key: tuple[str, str] | None = None
        self._target: KfpMetrics | None = None
        self._failed = False

    def target(self) -> KfpMetrics | None:
        """The target of the current environment (None outside such a step)."""
        path = os.environ.get(ENV_METRICS_PATH, "")
        raw = os.environ.get(ENV_EXECUTOR_INPUT, "")
        if not path or not raw:
            return None
        if self._key != (path, raw):
            self._key = (path, raw)
            self._target = KfpMetrics.from_values(path, raw)
        return self._target

    def write(self, target: KfpMetrics, progress: Progress) -> None:
        """Writes ``progress`` to ``target``; a failure is logged (once), never raised."""
        try:
            target.write(progress)
        except (OSError, ValueError) as e:
            if not self._failed:
                log.warning("cannot write the step's %s artifact: %s", ARTIFACT, e)
            self._failed = True


def _read_json(path: str) -> dict[str, Any]:
    """The JSON object in ``path``; empty when there is none (or it is not an object)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError:
        log.warning("%s is not JSON; it is replaced", path)
        return {}
    return doc if isinstance(doc, dict) else {}


def _replace_json(path: str, doc: Mapping[str, Any]) -> None:
    """Replaces ``path`` with ``doc`` atomically (its folder is made when missing)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, sort_keys=True)
    os.replace(tmp, path)
