"""A launcher step's ``Metrics`` output artifact: the job's last progress report.

Every launcher step has the output artifact ``tether_metrics`` (KFP's ``system.Metrics``; a
native step has it with ``KubernetesOptions(metrics=True)``, written by the job itself:
:mod:`tether.runtime.kfp_metrics`). While the job runs, each new report
(:func:`tether.runtime.report`) replaces the artifact's scalars (its metadata:
:meth:`~tether.tracker.progress.Progress.scalars`) and its file (the report as JSON). KFP
stores the artifact when the step ends, so the run's UI shows the job's final metrics on the
step; the step's log shows every report as it comes.

This module does not import KFP: it writes to the artifact object KFP hands to the step.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Protocol

from tether.tracker.progress import Progress

log = logging.getLogger(__name__)


class MetricsArtifact(Protocol):
    """What is written of KFP's ``Metrics`` artifact (``kfp.dsl.Metrics`` has all of it)."""

    metadata: dict[str, Any]

    @property
    def path(self) -> str: ...

    def log_metric(self, metric: str, value: float) -> None: ...


class MetricsRecorder:
    """Makes a step's ``Metrics`` artifact hold the job's latest report (a progress sink).

    Each report replaces the scalars the one before it wrote (the artifact's other metadata
    stays). A file that cannot be written is logged, not raised: the job's result never
    depends on it.

    Args:
        artifact: The step's ``Metrics`` output artifact.
    """

    def __init__(self, artifact: MetricsArtifact) -> None:
        self.artifact = artifact
        self._written: set[str] = set()

    def __call__(self, progress: Progress) -> None:
        """Records ``progress`` in the artifact."""
        values = progress.scalars()
        for name in self._written - values.keys():
            self.artifact.metadata.pop(name, None)
        for name, value in values.items():
            self.artifact.log_metric(name, value)
        self._written = set(values)
        try:
            path = self.artifact.path
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(progress.to_dict(), f, sort_keys=True)
            os.replace(tmp, path)
        except (OSError, ValueError) as e:
            log.warning("cannot write the step's metrics file: %s", e)
