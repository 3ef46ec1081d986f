"""What the watch-hub benchmarks share: request and process counts, and the results files.

Every ``benchmarks/watch_*bench.py`` script measures one follower path (issue 38) and
writes its rows into one section of ``benchmarks/results/watch.json``; ``watch.md`` is
rendered from every section, so the scripts can run one at a time, in any order.

Counts only: apiserver requests come from the apiserver's own ``apiserver_request_total``,
process CPU and memory from ``/proc``. Nothing here fails because of a number.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OLD_TRIGGER_PER_JOB_MINUTE = 48.0
"""Requests per followed job per minute of the per-task polling trigger (issue 38's
measurement on the e2e apiserver: a reconcile and a status read per trigger every 5 s)."""

RequestKey = tuple[str, str, str, str]
"""``(verb, resource, subresource, scope)`` of ``apiserver_request_total``."""


CONTROLLER_CONTENT_TYPE = "protobuf"
"""The controllers (kube-controller-manager) ask the apiserver for protobuf; the Python
client tether uses asks for JSON (logs are ``other``). ``apiserver_request_total`` has no
client label, so its ``contentType`` tells tether's requests from the controllers'."""


def apiserver_requests(metrics_text: str) -> Counter[RequestKey]:
    """tether's requests the apiserver counted, by verb, resource, subresource and scope.

    Args:
        metrics_text: The apiserver's ``/metrics`` page.

    Returns:
        The counts of resource requests not answered in protobuf (the Python client's).
    """
    counts: Counter[RequestKey] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if CONTROLLER_CONTENT_TYPE in labels.get("contentType", "") or not labels.get(
                "resource"):  # the controllers', or a non-resource URL (/metrics, discovery)
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""),
               labels.get("subresource", ""), labels.get("scope", ""))
        counts[key] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def delta(after: Counter[RequestKey], before: Counter[RequestKey]) -> Counter[RequestKey]:
    """``after - before`` (a counter reset reads as zero, not negative)."""
    return Counter({k: v - before.get(k, 0) for k, v in after.items()
                    if v - before.get(k, 0) > 0})


def split(counts: Mapping[RequestKey, int]) -> dict[str, int]:
    """Requests by purpose: ``follow`` (reads of jobs and pods: the hub's list and watch,
    ``describe``), ``logs`` (log streaming: a pod's log, and a pod read by name while it
    waits for the container), ``other`` (submitting, cancelling...).

    Args:
        counts: Counts from :func:`apiserver_requests` (or a difference of two).

    Returns:
        The three totals.
    """
    out = {"follow": 0, "logs": 0, "other": 0}
    for (verb, resource, sub, scope), n in counts.items():
        if sub == "log" or (verb == "GET" and resource == "pods" and scope == "resource"):
            out["logs"] += n
        elif verb in ("LIST", "WATCH", "GET") and resource in ("jobs", "pods") and not sub:
            out["follow"] += n
        else:
            out["other"] += n
    return out


def breakdown(counts: Mapping[RequestKey, int]) -> dict[str, int]:
    """Counts keyed ``"VERB resource[/subresource]"`` for the results file."""
    out: Counter[str] = Counter()
    for (verb, resource, sub, _scope), n in counts.items():
        out[f"{verb} {resource}{'/' + sub if sub else ''}"] += n
    return dict(sorted(out.items()))


def group_pids(pgid: int) -> list[int]:
    """Every live process of a process group."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[0] is the state; pgrp is the fifth field
            pids.append(int(entry))
    return pids


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes have used (their own, not their children's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def rss_kib(pids: Iterable[int]) -> int:
    """Resident memory of the processes, KiB."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def load(path: Path) -> dict[str, Any]:
    """The results file's sections (the first version's bare list is the Runner section)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return {"kubernetes_runner": data}
    return dict(data)


def update(section: str, rows: list[dict[str, Any]], out: Path = RESULTS,
           key: str = "n") -> Path:
    """Replaces the section's rows with the same ``key`` value, then writes both files.

    Args:
        section: One of :data:`SECTIONS`.
        rows: The new rows.
        out: The results folder.
        key: The field that names a row (rows measured again replace the old ones).

    Returns:
        The Markdown file.
    """
    out.mkdir(parents=True, exist_ok=True)
    data = load(out / "watch.json")
    fresh = {r[key] for r in rows}
    kept = [r for r in data.get(section, []) if r.get(key) not in fresh]
    data[section] = sorted(kept + rows, key=lambda r: r[key])
    ordered = {name: data[name] for name in SECTIONS if name in data}
    (out / "watch.json").write_text(json.dumps(ordered, indent=2) + "\n")
    md = out / "watch.md"
    md.write_text(render(ordered))
    return md


def _f(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _runner(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Runner / Subscription path (e2e kube-apiserver)",
        "",
        "| N | requests following (total) | per job per minute | one poll of all jobs "
        "| per job per minute at one poll per 5 s | CPU % of a core | KiB per job "
        "| change latency (median s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['requests_following']} | {r['requests_per_job_per_minute']:.4f} "
            f"| {r['requests_one_poll_of_all']} | {r['poll_every_5s_per_job_per_minute']:.0f} "
            f"| {r['cpu_percent_of_one_core']:.2f} | {r['memory_kib_per_job']:.1f} "
            f"| {_f(r['change_latency_median_s'], '.3f')} |"
        )
    by_n = {r["n"]: r for r in rows}
    if 100 in by_n and 2000 in by_n:
        ratio = by_n[2000]["requests_following"] / max(by_n[100]["requests_following"], 1)
        lines += ["", f"Requests following N = 2000 / N = 100: {ratio:.2f}."]
    window = rows[0]["window_s"] if rows else 0
    lines += ["", f"Window: {window:.0f} s of following per N. Reproduce: "
              "`python benchmarks/watch_bench.py --n 10 100 1000 2000`."]
    return lines


def _airflow(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Airflow triggerer (real Airflow 3 triggerer, e2e kube-apiserver)",
        "",
        "| N deferred tasks | stream_logs | triggers running | window s | requests in window "
        "| per job per minute | of which following | of which log streaming "
        "| old trigger per job per minute | triggerer CPU % of a core | triggerer RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['stream_logs']} | {r['triggers_running']} | {r['window_s']:.0f} "
            f"| {r['requests_window']} | {r['requests_per_job_per_minute']:.3f} "
            f"| {r['follow_per_job_per_minute']:.3f} | {r['logs_per_job_per_minute']:.3f} "
            f"| {r['old_per_job_per_minute']:.0f} "
            f"| {r['triggerer_cpu_percent']:.1f} | {r['triggerer_rss_kib'] / 1024:.0f} |"
        )
    lines += ["", "Reproduce: `python benchmarks/watch_airflow_bench.py --n 200 --no-stream-logs`"
              " and `python benchmarks/watch_airflow_bench.py --n 20`."]
    return lines


def _prefect(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Prefect flow mapping a tether task (real Prefect server, e2e kube-apiserver)",
        "",
        "| N inputs | window s | requests while waiting | per job per minute "
        "| of which following | of which log streaming "
        "| requests whole flow | per job, whole flow | of which following "
        "| of which log streaming | flow state |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['window_s']:.0f} | {r['requests_window']} "
            f"| {r['requests_per_job_per_minute']:.3f} "
            f"| {r['follow_per_job_per_minute']:.3f} | {r['logs_per_job_per_minute']:.3f} "
            f"| {r['requests_flow']} "
            f"| {r['requests_flow_per_job']:.1f} | {r['follow_requests_flow_per_job']:.1f} "
            f"| {r['logs_requests_flow_per_job']:.1f} | {r['flow_state']} |"
        )
    lines += ["", "Reproduce: `python benchmarks/watch_prefect_bench.py --n 200`."]
    return lines


def _slurm(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Slurm (real slurmctld, one follower process)",
        "",
        "| N followed jobs | window s | hub reads | squeue+sacct run | per minute "
        "| slurmctld job-info RPCs per minute | per job per minute "
        "| old way: RPCs per minute (one describe per job per interval) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['window_s']:.0f} | {r['reads']} | {r['commands']} "
            f"| {r['commands_per_minute']:.1f} | {r['ctld_job_info_rpcs_per_minute']:.1f} "
            f"| {r['commands_per_job_per_minute']:.3f} | {r['old_rpcs_per_minute']:.0f} |"
        )
    lines += ["", "Reproduce: `python benchmarks/watch_slurm_bench.py --n 1 200`."]
    return lines


SECTIONS: dict[str, Callable[[list[dict[str, Any]]], list[str]]] = {
    "kubernetes_runner": _runner,
    "airflow_triggerer": _airflow,
    "prefect_flow": _prefect,
    "slurm": _slurm,
}


def render(data: Mapping[str, list[dict[str, Any]]]) -> str:
    """``watch.md`` from every section measured so far."""
    lines = ["# Following N jobs through the watch hub", "",
             "Counts from the real software; see docs/scale.md for the design and the method.",
             ""]
    for name, rows in data.items():
        if rows:
            lines += [*SECTIONS[name](rows), ""]
    return "\n".join(lines)
