"""AppRun.run_from_env: env wiring, .tetherconfig fallback, local default, outputs, ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tracker.helpers import start_python, wait_all
from tether.tracker import (
    AppRun,
    TrackerSource,
    UnknownTrackerError,
    read_outputs,
)
from tether.tracker.backend.fsspec import FsspecTracker, create
from tether.tracker.outputs import outputs_url

JOB = "local_cwd://tether/train-x1y2"


def _job_env(monkeypatch: pytest.MonkeyPatch, store: Path, **extra: str) -> None:
    monkeypatch.setenv("TETHER_JOB_ID", JOB)
    monkeypatch.setenv("TETHER_TRACKERS", "fsspec")
    monkeypatch.setenv("TETHER_TRACKER_FSSPEC_CONFIG", str(store))
    for k, v in extra.items():
        monkeypatch.setenv(k, v)


def test_run_from_env_inside_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    _job_env(
        monkeypatch, store,
        TETHER_PARENT_RUN_ID="airflow://etl/run-7",
        TETHER_OUTPUTS_URL=str(tmp_path / "outputs" / "train-x1y2"),
        TETHER_APP_NAME="sweep/trial-1",
    )
    run = AppRun.run_from_env()
    assert run.job_id == JOB and run.id == JOB
    assert run.parent_run_id == "airflow://etl/run-7"
    assert run.app_name == "sweep/trial-1"
    assert list(run.backends) == ["fsspec"]

    run.add_metadata(lr=0.1)
    run.add_artifact("model", "/models/m.pt", {"epoch": 3})
    run.add_source("local_cwd://tether/prep-1", "dataset")
    run.add_output("accuracy", 0.93)

    tracker = create(str(store))
    assert tracker.metadata(JOB) == {"lr": 0.1}
    assert tracker.artifacts(JOB)["model"].metadata == {"epoch": 3}
    assert set(tracker.sources(JOB)) == {
        TrackerSource("airflow://etl/run-7"),
        TrackerSource("local_cwd://tether/prep-1", "dataset"),
    }
    assert tracker.run_ids(parent_run_id="airflow://etl/run-7") == [JOB]
    assert read_outputs(str(tmp_path / "outputs" / "train-x1y2")) == {"accuracy": 0.93}
    assert run.metadata() == {"lr": 0.1}
    assert [p.run_id for p in run.lineage().parents] == [
        "airflow://etl/run-7",
        "local_cwd://tether/prep-1",
    ]


def test_the_run_is_listed_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job_env(monkeypatch, tmp_path / "store")
    AppRun.run_from_env()
    assert create(str(tmp_path / "store")).run_ids() == [JOB]


def test_same_environment_same_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_env(monkeypatch, tmp_path / "store")
    assert AppRun.run_from_env() is AppRun.run_from_env()
    monkeypatch.setenv("TETHER_JOB_ID", "local_cwd://tether/other")
    assert AppRun.run_from_env().job_id == "local_cwd://tether/other"


def test_trackers_from_tetherconfig_and_env_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / ".tetherconfig"
    cfg.write_text(
        f"[tether:tracker]\nfsspec =\n\n[tracker:fsspec]\nconfig = {tmp_path / 'from-file'}\n"
    )
    monkeypatch.setenv("TETHERCONFIG", str(cfg))
    monkeypatch.setenv("TETHER_JOB_ID", JOB)
    backend = AppRun.run_from_env().backends["fsspec"]
    assert isinstance(backend, FsspecTracker)
    assert backend.url == str(tmp_path / "from-file")

    monkeypatch.setenv("TETHER_TRACKER_FSSPEC_CONFIG", str(tmp_path / "from-env"))
    backend = AppRun.run_from_env().backends["fsspec"]
    assert isinstance(backend, FsspecTracker)
    assert backend.url == str(tmp_path / "from-env")


def test_no_trackers_in_a_job_means_tracking_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_JOB_ID", JOB)
    run = AppRun.run_from_env()
    assert run.backends == {}
    run.add_metadata(a=1)  # no-op, no error
    assert run.metadata() == {}


def test_outside_a_job_local_default(tmp_path: Path) -> None:
    run = AppRun.run_from_env()
    assert run.job_id.startswith("local://")
    assert list(run.backends) == ["fsspec"]
    run.add_metadata(a=1)
    tracker = create(str(tmp_path / "state" / "tracker"))
    assert tracker.run_ids() == [run.job_id]
    assert tracker.metadata(run.job_id) == {"a": 1}
    run.add_output("n", 3)
    url = outputs_url(str(tmp_path / "state" / "outputs"), "local", run.job_id.rsplit("/", 1)[1])
    assert read_outputs(url) == {"n": 3}
    assert AppRun.run_from_env().job_id == run.job_id


def test_unknown_tracker_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_JOB_ID", JOB)
    monkeypatch.setenv("TETHER_TRACKERS", "fsspc")
    with pytest.raises(UnknownTrackerError, match="Did you mean fsspec"):
        AppRun.run_from_env()


def test_bad_output_name_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_env(monkeypatch, tmp_path / "store", TETHER_OUTPUTS_URL=str(tmp_path / "o"))
    with pytest.raises(ValueError, match="output name 'a/b' is not allowed"):
        AppRun.run_from_env().add_output("a/b", 1)


@pytest.mark.slow
def test_two_ranks_write_one_mlflow_run_and_one_fsspec_run(tmp_path: Path) -> None:
    uri = f"file://{tmp_path / 'mlruns'}"
    env = {
        "TETHER_JOB_ID": JOB,
        "TETHER_PARENT_RUN_ID": "pipeline://p/1",
        "TETHER_APP_NAME": "exp/run",
        "TETHER_TRACKERS": "fsspec,mlflow",
        "TETHER_TRACKER_FSSPEC_CONFIG": str(tmp_path / "store"),
        "TETHER_TRACKER_MLFLOW_CONFIG": uri,
    }
    code = """
        import os
        from tether.tracker import AppRun
        run = AppRun.run_from_env()
        rank = os.environ["RANK"]
        run.add_metadata(**{"rank" + rank: int(rank)})
        run.add_artifact("ckpt-" + rank, "/ckpt/" + rank)
    """
    wait_all([start_python(code, {**env, "RANK": str(r)}) for r in range(2)])
    from tether.tracker.backend.mlflow import create as create_mlflow

    for tracker in (create(str(tmp_path / "store")), create_mlflow(uri)):
        assert list(tracker.run_ids()) == [JOB]
        assert tracker.metadata(JOB) == {"rank0": 0, "rank1": 1}
        assert sorted(tracker.artifacts(JOB)) == ["ckpt-0", "ckpt-1"]
        assert list(tracker.run_ids(parent_run_id="pipeline://p/1")) == [JOB]
