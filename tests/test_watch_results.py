"""The watch benchmarks' shared counting and results file (benchmarks/watch_results.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks import watch_results as results

METRICS = """\
# HELP apiserver_request_total ...
apiserver_request_total{code="200",component="apiserver",contentType="application/json",\
dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="LIST",\
version="v1"} 101
apiserver_request_total{code="404",component="apiserver",contentType="application/json",\
dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="LIST",\
version="v1"} 2
apiserver_request_total{code="201",component="apiserver",contentType="application/json",\
dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",\
version="v1"} 7
apiserver_request_total{code="200",component="apiserver",\
contentType="application/vnd.kubernetes.protobuf",dry_run="",group="batch",resource="jobs",\
scope="resource",subresource="status",verb="PUT",version="v1"} 1134
apiserver_request_total{code="200",component="apiserver",contentType="application/json",\
dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",\
version="v1"} 1.0e+01
apiserver_request_total{code="400",component="apiserver",contentType="other",dry_run="",\
group="",resource="pods",scope="resource",subresource="log",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",contentType="text/plain",\
dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 9
"""


def test_only_the_python_clients_requests_are_counted_by_kind() -> None:
    counts = results.apiserver_requests(METRICS)
    # the controller-manager's protobuf PUTs are not tether's, nor reads of /metrics
    assert results.breakdown(counts) == {
        "GET pods/log": 3, "LIST jobs": 103, "PATCH pods/status": 10, "POST jobs": 7}
    # a pod read by name is a log stream waiting for its container; lists are following
    counts[("GET", "pods", "", "resource")] += 5
    assert results.split(counts) == {"follow": 103, "logs": 8, "other": 17}
    later = counts.copy()
    later[("LIST", "jobs", "", "namespace")] += 4
    assert results.breakdown(results.delta(later, counts)) == {"LIST jobs": 4}


def test_a_section_update_keeps_other_rows_and_sections(tmp_path: Path) -> None:
    # the first results file was the Runner section's bare list
    (tmp_path / "watch.json").write_text(json.dumps([
        {"n": 10, "requests_following": 4, "requests_per_job_per_minute": 0.4,
         "requests_one_poll_of_all": 20, "poll_every_5s_per_job_per_minute": 24.0,
         "cpu_percent_of_one_core": 0.01, "memory_kib_per_job": 36.0,
         "change_latency_median_s": None, "window_s": 60.0},
    ]))
    slurm = {"n": 200, "window_s": 60.0, "reads": 12, "commands": 12,
             "commands_per_minute": 12.0, "commands_per_job_per_minute": 0.06,
             "ctld_job_info_rpcs_per_minute": 12.0, "old_rpcs_per_minute": 2400.0}
    md = results.update("slurm", [slurm], tmp_path)
    again = dict(slurm, commands=11)
    results.update("slurm", [again], tmp_path)
    data = json.loads((tmp_path / "watch.json").read_text())
    assert list(data) == ["kubernetes_runner", "slurm"]
    assert [r["n"] for r in data["kubernetes_runner"]] == [10]
    assert data["slurm"] == [again]  # measured again: replaced, not added
    text = md.read_text()
    assert "| 10 | 4 | 0.4000 |" in text and "| 200 | 60 | 12 | 11 |" in text


def test_a_process_groups_cpu_and_memory_are_read() -> None:
    mine = results.group_pids(os.getpgrp())
    assert os.getpid() in mine
    assert results.rss_kib(mine) > 0
    assert results.cpu_seconds(mine) > 0
