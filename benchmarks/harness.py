"""Timing machinery: alternating runs, medians, peak RSS, result files.

Every case runs its implementations in alternation (A, B, A, B...) after a warm-up, so drift
of the machine affects both sides alike. Subprocess cases take wall time and the child's peak
RSS from ``wait4``; in-process measurements come back as JSON from a script run in the
implementation's own venv.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Sample = dict[str, float]


@dataclass
class Measurement:
    """Samples of one metric of one implementation."""

    impl: str
    metric: str
    unit: str
    values: list[float] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)
    note: str = ""

    def summary(self) -> dict[str, Any]:
        vals = self.values
        return {
            "impl": self.impl,
            "metric": self.metric,
            "unit": self.unit,
            "n": len(vals),
            "median": statistics.median(vals) if vals else None,
            "min": min(vals) if vals else None,
            "max": max(vals) if vals else None,
            "peak_rss_mb": max(self.peak_rss_mb) if self.peak_rss_mb else None,
            "note": self.note,
        }


@dataclass
class CaseResult:
    """All measurements of one case, and the ratio tether/reference of the median."""

    name: str
    description: str
    measurements: list[Measurement]
    lower_is_better: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "lower_is_better": self.lower_is_better,
            "note": self.note,
            "measurements": [m.summary() for m in self.measurements],
        }


def run_cmd(argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> tuple[float, float, int, str]:
    """Runs a command; returns (wall seconds, peak RSS MiB, exit code, output tail)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024.0, proc.returncode, out.decode(errors="replace")[-2000:]


def alternate(
    impls: dict[str, Callable[[], Sample]], repeats: int, warmup: int = 1
) -> dict[str, list[Sample]]:
    """Runs each implementation's callable in alternation; returns the samples per impl."""
    for _ in range(warmup):
        for fn in impls.values():
            fn()
    samples: dict[str, list[Sample]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, fn in impls.items():
            samples[name].append(fn())
    return samples


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except OSError:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 10 else f"{v:.2f} s"
    return f"{v:,.1f} {unit}"


def write_results(results: list[CaseResult], out_dir: Path, info: dict[str, Any],
                  smoke: bool) -> Path:
    """Writes latest.json and latest.md (or smoke.*) and returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "smoke" if smoke else "latest"
    doc = {"machine": info, "smoke": smoke, "cases": [r.to_dict() for r in results]}
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        f"# tether benchmarks ({'smoke' if smoke else 'full'} run)",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, "
        f"Python {info['python']}, {info['time']}.",
        "Reference: torchx-nightly (see benchmarks/requirements-reference.txt), installed in "
        "its own venv; tether is installed from this tree the same way (`.venv-bench-tether`, "
        "no extras) for the CLI and API cases, and the adapter cases use the development venv. "
        "Ratio = tether / other (below 1 is better for time; above 1 for throughput).",
        "",
        "| case | metric | tether | other | other is | ratio | tether peak RSS | other peak RSS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        by_metric: dict[str, list[Measurement]] = {}
        for m in r.measurements:
            by_metric.setdefault(m.metric, []).append(m)
        for metric, ms in by_metric.items():
            ours = next((m for m in ms if m.impl == "tether"), None)
            others = [m for m in ms if m.impl != "tether"] or [None]  # type: ignore[list-item]
            for other in others:
                a = ours.summary() if ours else {}
                b = other.summary() if other else {}
                ratio = "-"
                if a.get("median") and b.get("median"):
                    ratio = f"{a['median'] / b['median']:.2f}"
                unit = (ours or other).unit if (ours or other) else ""
                lines.append(
                    f"| {r.name} | {metric} | {_fmt(a.get('median'), unit)} | "
                    f"{_fmt(b.get('median'), unit)} | {other.impl if other else '-'} | {ratio} | "
                    f"{_fmt(a.get('peak_rss_mb'), 'MiB')} | {_fmt(b.get('peak_rss_mb'), 'MiB')} |"
                )
        if r.note:
            lines.append(f"| {r.name} | note | {r.note} | | | | | |")
    md = out_dir / f"{stem}.md"
    md.write_text("\n".join(lines) + "\n")
    return md
