"""Progress reports: the latest step, total, metrics and ETA a running job published.

A job reports through :func:`tether.runtime.report`; the report is one JSON document,
``.progress.json``, in the app's outputs folder (``$TETHER_OUTPUTS_URL``), replaced in place
by every report. Its leading dot keeps it out of :func:`~tether.tracker.outputs.read_outputs`.
The Runner (``Runner.progress(handle)``), ``tether status`` and the orchestrator adapters read
it back with :func:`read_progress` while the job runs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from tether.errors import SpecError, SpecTypeError

PROGRESS_FILE = ".progress.json"
"""The report's file name in the app's outputs folder."""


@dataclass(frozen=True)
class Progress:
    """One progress report of a job.

    Args:
        step: Steps done (None when the job reports metrics only).
        total: Steps in all, when known.
        metrics: Metric name to number (loss, accuracy, epoch...).
        eta_s: Seconds left, estimated from the rate of steps so far (or given by the job).
        time: When the job reported (seconds since the epoch).
        seq: The report's number (1 for the first report of the job's process).
    """

    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    eta_s: float | None = None
    time: float = 0.0
    seq: int = 0

    @property
    def fraction(self) -> float | None:
        """``step / total`` clamped to [0, 1], when both are known."""
        if self.step is None or not self.total:
            return None
        return min(max(self.step / self.total, 0.0), 1.0)

    def format(self) -> str:
        """``3/10 (30%) loss=0.33 eta 1m05s``: the report in one line."""
        parts: list[str] = []
        if self.step is not None:
            frac = self.fraction
            text = f"{self.step}/{self.total}" if self.total else f"step {self.step}"
            parts.append(text if frac is None else f"{text} ({frac:.0%})")
        parts.extend(f"{k}={_number(v)}" for k, v in self.metrics.items())
        if self.eta_s is not None:
            parts.append(f"eta {_duration(self.eta_s)}")
        return " ".join(parts) or "(no progress reported)"

    def scalars(self) -> dict[str, float]:
        """The report as named numbers: its metrics, then ``step``, ``total`` and ``eta_s``
        when known (what a KFP ``Metrics`` artifact holds). A metric named like one of those
        is kept; the report's own field does not replace it."""
        out = dict(self.metrics)
        for name, value in (("step", self.step), ("total", self.total),
                            ("eta_s", self.eta_s)):
            if value is not None and name not in out:
                out[name] = float(value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"step": self.step, "total": self.total, "metrics": dict(self.metrics),
                "eta_s": self.eta_s, "time": self.time, "seq": self.seq}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Progress:
        """A report from :meth:`to_dict`'s data (unknown keys are ignored)."""
        metrics = doc.get("metrics") or {}
        return cls(step=doc.get("step"), total=doc.get("total"),
                   metrics={str(k): float(v) for k, v in metrics.items()},
                   eta_s=doc.get("eta_s"), time=float(doc.get("time") or 0.0),
                   seq=int(doc.get("seq") or 0))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def _duration(seconds: float) -> str:
    s = max(round(seconds), 0)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def check_report(step: Any, total: Any, metrics: dict[str, Any]) -> dict[str, float]:
    """Checks a report's values; returns the metrics as floats.

    Raises:
        SpecTypeError: For a step, total or metric that is not a number.
        SpecError: For a negative step or total, or a metric that is not finite.
    """
    for name, value in (("step", step), ("total", total)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecTypeError(f"report: {name}={value!r} is not allowed: use an int >= 0")
        if value < 0:
            raise SpecError(f"report: {name}={value!r} is not allowed: use an int >= 0")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:  # numpy and torch scalars
                value = float(value)
            except (TypeError, ValueError):
                raise SpecTypeError(
                    f"report: metric {name}={value!r} is not allowed: use a number"
                ) from None
        if not math.isfinite(value):
            raise SpecError(f"report: metric {name}={value!r} is not allowed: use a finite number")
        out[name] = float(value)
    return out


def write_progress(url: str, progress: Progress) -> None:
    """Replaces the app's report with ``progress`` (atomically: a reader sees one or the other).

    Args:
        url: The app's outputs URL.
        progress: The report.
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    base = path.rstrip("/")
    tmp = f"{base}/.progress.{os.urandom(8).hex()}.tmp"
    try:
        with fs.open(tmp, "w") as f:
            f.write(json.dumps(progress.to_dict()))
    except FileNotFoundError:
        fs.makedirs(base, exist_ok=True)
        with fs.open(tmp, "w") as f:
            f.write(json.dumps(progress.to_dict()))
    fs.mv(tmp, f"{base}/{PROGRESS_FILE}")


def read_progress(url: str) -> Progress | None:
    """The latest report of an app.

    Args:
        url: The app's outputs URL.

    Returns:
        The report, or None when the app reported none (or its report cannot be read).
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    try:
        with fs.open(f"{path.rstrip('/')}/{PROGRESS_FILE}", "r") as f:
            doc = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return Progress.from_dict(doc)
    except (TypeError, ValueError, AttributeError):
        return None
