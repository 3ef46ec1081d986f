"""The Slurm recovery benchmark's figures and page (``benchmarks/recovery_slurm_bench.py``);
the benchmark itself runs on the real cluster, by hand."""

from __future__ import annotations

from benchmarks import recovery_slurm_bench as bench


def test_summary_gives_median_p90_and_max() -> None:
    s = bench._summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["n"], s["median"], s["min"], s["max"]) == (5, 3.0, 1.0, 5.0)
    assert bench._summary([]) == {"n": 0}


def test_page_shows_every_figure() -> None:
    row = {
        "failures": 50, "kinds": {"node_down": 25, "preempted": 25}, "final_state": "SUCCEEDED",
        "attempts": 51, "slurm_jobs": 51, "duplicate_attempts": 0, "orphaned_jobs": 0,
        "lost_checkpoints": 0, "latency_s": bench._summary([2.5, 3.5]),
        "latency_slurm_clock_s": bench._summary([3.0, 4.0]), "follow_interval_s": 5.0,
        "observer_poll_s": 0.2,
    }  # fmt: skip
    page = bench.render(row)
    assert "| failures injected in a row | 50 (25 node_down, 25 preempted) |" in page
    assert "median s | 3.00 |" in page and "| duplicate attempts | 0 |" in page
    assert "| attempts / Slurm jobs | 51 / 51 |" in page
    assert "--failures 50" in page


def test_slurm_times_are_read_to_the_second() -> None:
    later = bench._slurm_time("2026-11-28T10:00:05")
    assert later - bench._slurm_time("2026-11-28T10:00:00") == 5.0
