"""tether.runtime.report: a job's progress reports, rate-limited, read back as written.

The Runner and ``tether status`` reading a running job's report: tests/cli/test_manage.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.errors import SpecError, SpecTypeError
from tether.runtime import progress as progress_mod
from tether.runtime import report
from tether.tracker.outputs import read_outputs
from tether.tracker.progress import Progress, read_progress


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh reporter of this process writing to a private outputs URL."""
    out = str(tmp_path / "outputs" / "local_cwd" / "app-1")
    monkeypatch.setenv("TETHER_OUTPUTS_URL", out)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(progress_mod, "_reporter", progress_mod._Reporter())
    return out


def test_report_is_read_back_and_kept_out_of_outputs(url: str) -> None:
    assert report(step=3, total=10, loss=0.33, epoch=1)
    got = read_progress(url)
    assert got is not None
    assert (got.step, got.total, got.metrics) == (3, 10, {"loss": 0.33, "epoch": 1.0})
    assert got.format() == "3/10 (30%) loss=0.33 epoch=1"
    assert read_outputs(url) == {}  # a report is not one of the job's outputs


def test_reports_are_rate_limited_and_the_latest_is_written_later(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_PROGRESS_INTERVAL", "3600")
    assert report(step=1, total=10)  # the first one is always written
    assert not report(step=2, total=10, loss=0.5)  # within the interval: kept
    got = read_progress(url)
    assert got is not None and got.step == 1
    progress_mod._reporter.flush()  # what the process's exit does
    got = read_progress(url)
    assert got is not None and (got.step, got.metrics) == (2, {"loss": 0.5})
    assert not report(step=3, total=10)
    assert report(step=10, total=10)  # reaching total is always written
    got = read_progress(url)
    assert got is not None and got.step == 10 and got.eta_s == 0.0
    assert not report(step=4, total=10) and report(step=5, total=10, flush=True)


def test_eta_from_the_rate_of_steps(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 110.0])
    monkeypatch.setattr(progress_mod.time, "time", lambda: next(clock))
    report(step=0, total=10)
    report(step=2, total=10)  # 2 steps in 10 s: 8 left take 40 s
    got = read_progress(url)
    assert got is not None and got.eta_s == pytest.approx(40.0)
    assert got.format() == "2/10 (20%) eta 40s"


def test_nothing_is_written_outside_a_job_or_off_rank_0(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert not report(step=1, total=2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("TETHER_OUTPUTS_URL")
    assert not report(step=1, total=2)
    assert read_progress(url) is None


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"step": "3"}, SpecTypeError, r"step='3' is not allowed: use an int >= 0"),
    ({"step": -1}, SpecError, r"step=-1 is not allowed"),
    ({"total": 2.5}, SpecTypeError, r"total=2.5 is not allowed"),
    ({"loss": "low"}, SpecTypeError, r"metric loss='low' is not allowed: use a number"),
    ({"loss": float("nan")}, SpecError, r"metric loss=nan is not allowed: use a finite"),
])
def test_bad_values_name_the_field(url: str, kwargs: dict[str, object],
                                   error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        report(**kwargs)  # type: ignore[arg-type]


def test_format() -> None:
    assert Progress(step=7).format() == "step 7"
    assert Progress(metrics={"acc": 0.912345}).format() == "acc=0.9123"
    assert Progress(step=1, total=3, eta_s=3725).format() == "1/3 (33%) eta 1h02m"
    assert Progress().format() == "(no progress reported)"
    p = Progress(step=1, total=3, metrics={"loss": 1.5}, eta_s=65.0, time=5.0, seq=2)
    assert Progress.from_dict(json.loads(json.dumps(p.to_dict()))) == p



def test_a_tracker_that_fails_never_fails_the_job(
        url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from tether.tracker.app_run import clear_cache

    monkeypatch.setenv("TETHER_JOB_ID", "local_cwd://tether/app-1")
    monkeypatch.setenv("TETHER_TRACKERS", "no_such_tracker")
    clear_cache()
    try:
        assert report(step=1, total=3, loss=1.0)
        assert report(step=3, total=3, loss=0.5)
    finally:
        clear_cache()
    got = read_progress(url)  # the report itself is written
    assert got is not None and got.step == 3
    warnings = [r for r in caplog.records if "cannot record the progress report" in r.message]
    assert len(warnings) == 1 and "no_such_tracker" in warnings[0].getMessage()
