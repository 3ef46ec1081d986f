"""The mlflow tracker against real MLflow stores (file store and SQLite)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from mlflow import MlflowClient

from tests.tracker.helpers import start_python, wait_all
from tether.tracker import TrackerArtifact, TrackerSource
from tether.tracker.backend.mlflow import (
    TAG_RUN_ID,
    MLflowTracker,
    create,
    experiment_from_app_name,
    parse_config,
)

RUN = "local_cwd://tether/train-x1y2"


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty MLflow SQLite store (creating one takes seconds)."""
    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}")
    return db


@pytest.fixture(params=["file", "sqlite"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'mlruns'}"
    db = tmp_path / "mlflow.db"
    shutil.copyfile(sqlite_template, db)
    return f"sqlite:///{db}"


def _runs_named(uri: str, run_id: str) -> list[object]:
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # restored by conftest
    client = MlflowClient(uri)
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(exp_ids, filter_string=f"tags.`{TAG_RUN_ID}` = '{run_id}'"))


def test_round_trip_in_a_real_store(store_uri: str) -> None:
    tracker = create(store_uri)
    tracker.add_metadata(RUN, lr=0.1, layers=[64, 64])
    tracker.add_metadata(RUN, lr=0.01)
    tracker.add_artifact(RUN, "model", "s3://bucket/m.pt", {"format": "torchscript"})
    tracker.add_source(RUN, "pipeline://nightly/7", "dataset")
    tracker.add_source(RUN, "pipeline://nightly/7", "dataset")

    again = create(store_uri)  # a fresh tracker finds the run by name
    assert again.metadata(RUN) == {"lr": 0.01, "layers": [64, 64]}
    assert again.artifacts(RUN) == {
        "model": TrackerArtifact("model", "s3://bucket/m.pt", {"format": "torchscript"})
    }
    assert list(again.sources(RUN)) == [TrackerSource("pipeline://nightly/7", "dataset")]
    assert list(again.sources(RUN, artifact_name="other")) == []
    assert again.run_ids() == [RUN]
    assert again.metadata("local_cwd://tether/unknown") == {}

    runs = _runs_named(store_uri, RUN)
    assert len(runs) == 1
    assert runs[0].info.run_name == RUN  # type: ignore[attr-defined]
    assert runs[0].data.tags["tether.md.lr"] == "0.01"  # type: ignore[attr-defined]


def test_experiment_comes_from_the_app_name(
    store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_APP_NAME", "resnet-sweep/trial-3")
    monkeypatch.setenv("TETHER_JOB_ID", RUN)
    create(f"{store_uri};experiment=ignored").ensure_run(RUN)
    client = MlflowClient(store_uri)
    exp = client.get_experiment_by_name("resnet-sweep")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["tether.app_name"] == "resnet-sweep/trial-3"


def test_experiment_from_config_then_default(store_uri: str) -> None:
    assert create(f"{store_uri};experiment=team-a").experiment_name == "team-a"
    assert create(store_uri).experiment_name == "tether"
    assert experiment_from_app_name("a/b/c") == "a/b"
    assert experiment_from_app_name("plain") is None


def test_config_errors_name_the_allowed_keys() -> None:
    assert parse_config("sqlite:////x.db;experiment=e") == ("sqlite:////x.db", {"experiment": "e"})
    with pytest.raises(ValueError, match="key one of experiment, artifact_location"):
        parse_config("sqlite:////x.db;exp=e")


def test_default_store_is_sqlite_in_the_state_dir(tmp_path: Path) -> None:
    tracker = create(None)
    tracker.add_metadata(RUN, a=1)
    assert (tmp_path / "state" / "mlflow" / "mlflow.db").is_file()
    assert create(None).metadata(RUN) == {"a": 1}


def test_parent_with_two_children_lineage(store_uri: str) -> None:
    tracker = create(store_uri)
    parent = "pipeline://nightly/7"
    kids = ["local_cwd://tether/train-1", "local_cwd://tether/train-2"]
    tracker.add_artifact(parent, "dataset", "/data/ds")
    for i, kid in enumerate(kids):
        tracker.add_source(kid, parent)
        tracker.add_artifact(kid, "model", f"/models/{i}.pt")
    tracker.add_source("local_cwd://tether/unrelated", "pipeline://other")

    lin = create(store_uri).lineage(parent)
    assert lin.artifacts == {"dataset": TrackerArtifact("dataset", "/data/ds")}
    assert lin.parents == []
    assert [c.run_id for c in lin.children] == kids
    assert lin.children[0].artifacts["model"].path == "/models/0.pt"
    assert tracker.run_ids(parent_run_id=parent) == kids

    up = tracker.lineage(kids[1])
    assert [p.run_id for p in up.parents] == [parent]
    assert up.parents[0].artifacts["dataset"].path == "/data/ds"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_ranks_racing_on_a_fresh_store_create_one_run(kind: str, tmp_path: Path) -> None:
    store_uri = (
        f"file://{tmp_path / 'mlruns'}" if kind == "file" else f"sqlite:///{tmp_path / 'new.db'}"
    )
    code = f"""
        import os
        from tether.tracker.backend.mlflow import create
        t = create({store_uri!r})
        t.ensure_run({RUN!r})
        rank = os.environ["RANK"]
        t.add_metadata({RUN!r}, **{{f"rank{{rank}}": int(rank)}})
        t.add_artifact({RUN!r}, f"ckpt-{{rank}}", f"/ckpt/{{rank}}")
    """
    env = {"TETHER_JOB_ID": RUN, "TETHER_APP_NAME": "exp/run"}
    procs = [start_python(code, {**env, "RANK": str(r)}) for r in range(2)]
    wait_all(procs)
    assert len(_runs_named(store_uri, RUN)) == 1
    tracker = create(store_uri)
    assert tracker.metadata(RUN) == {"rank0": 0, "rank1": 1}
    assert sorted(tracker.artifacts(RUN)) == ["ckpt-0", "ckpt-1"]
    client = MlflowClient(store_uri)
    assert [e.name for e in client.search_experiments() if e.name == "exp"] == ["exp"]


@pytest.mark.slow
def test_without_a_lock_rank0_creates_and_other_ranks_wait(
    tmp_path: Path, sqlite_template: Path
) -> None:
    shutil.copyfile(sqlite_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = f"""
        import os, time
        from tether.tracker.backend.mlflow import MLflowTracker
        if os.environ["RANK"] == "0":
            time.sleep(1.5)  # the other ranks get there first and must wait
        t = MLflowTracker({uri!r}, lock=False, wait_timeout=60)
        t.add_metadata({RUN!r}, **{{"rank" + os.environ["RANK"]: 1}})
    """
    procs = [start_python(code, {"TETHER_JOB_ID": RUN, "RANK": str(r)}) for r in range(2)]
    wait_all(procs)
    assert len(_runs_named(uri, RUN)) == 1
    assert create(uri).metadata(RUN) == {"rank0": 1, "rank1": 1}


def test_duplicate_runs_converge_on_the_oldest(tmp_path: Path, sqlite_template: Path) -> None:
    shutil.copyfile(sqlite_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = MLflowTracker(uri, lock=False)
    first.ensure_run(RUN)
    # a replica that did not see the first run (as with a racing server) creates another one
    racer = MLflowTracker(uri, lock=False)
    racer._find = lambda run_id: None  # type: ignore[method-assign]
    dup = racer._new_run(RUN)
    assert len(_runs_named(uri, RUN)) == 2
    fresh = MLflowTracker(uri, lock=False)
    fresh.add_metadata(RUN, x=1)
    oldest = min(_runs_named(uri, RUN), key=lambda r: r.info.start_time)  # type: ignore[attr-defined]
    assert oldest.info.run_id != dup.info.run_id  # type: ignore[attr-defined]
    assert oldest.data.tags.get("tether.md.x") == "1"  # type: ignore[attr-defined]
