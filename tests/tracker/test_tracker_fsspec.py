"""The fsspec tracker on a real local directory and on memory://."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import fsspec
import pytest

from tests.tracker.helpers import start_python, wait_all
from tether.tracker import TrackerArtifact, TrackerSource
from tether.tracker.backend.fsspec import (
    FsspecTracker,
    create,
    decode_run_id,
    encode_run_id,
)

RUN = "local_cwd://tether/train-x1y2"


@pytest.fixture(params=["local", "memory"])
def tracker(request: pytest.FixtureRequest, tmp_path: Path) -> FsspecTracker:
    if request.param == "local":
        return create(str(tmp_path / "store"))
    url = f"memory://tether-test-{uuid.uuid4().hex}"
    request.addfinalizer(lambda: fsspec.filesystem("memory").rm(url, recursive=True))
    return create(url)


def test_metadata_merges_writes_and_last_write_wins(tracker: FsspecTracker) -> None:
    tracker.add_metadata(RUN, lr=0.1, epochs=3)
    tracker.add_metadata(RUN, lr=0.01, optimizer={"name": "adam"})
    assert tracker.metadata(RUN) == {"lr": 0.01, "epochs": 3, "optimizer": {"name": "adam"}}
    assert tracker.metadata("local_cwd://tether/unknown") == {}


def test_artifacts_with_metadata(tracker: FsspecTracker) -> None:
    tracker.add_artifact(RUN, "model", "s3://bucket/m1.pt", {"step": 1})
    tracker.add_artifact(RUN, "model", "s3://bucket/m2.pt", {"step": 2})
    tracker.add_artifact(RUN, "logs", "/tmp/logs")
    assert tracker.artifacts(RUN) == {
        "model": TrackerArtifact("model", "s3://bucket/m2.pt", {"step": 2}),
        "logs": TrackerArtifact("logs", "/tmp/logs", None),
    }


def test_sources_are_deduplicated_and_filtered_by_artifact(tracker: FsspecTracker) -> None:
    tracker.add_source(RUN, "airflow://etl/run-1")
    tracker.add_source(RUN, "airflow://etl/run-1")
    tracker.add_source(RUN, "local_cwd://tether/prep", "dataset")
    assert sorted(tracker.sources(RUN), key=lambda s: s.source_run_id) == [
        TrackerSource("airflow://etl/run-1", None),
        TrackerSource("local_cwd://tether/prep", "dataset"),
    ]
    assert list(tracker.sources(RUN, artifact_name="dataset")) == [
        TrackerSource("local_cwd://tether/prep", "dataset")
    ]


def test_run_ids_lists_runs_and_children(tracker: FsspecTracker) -> None:
    tracker.ensure_run("local_cwd://tether/a")
    tracker.add_metadata("local_cwd://tether/b", x=1)
    tracker.add_source("local_cwd://tether/c", "local_cwd://tether/a")
    assert tracker.run_ids() == [
        "local_cwd://tether/a",
        "local_cwd://tether/b",
        "local_cwd://tether/c",
    ]
    assert tracker.run_ids(parent_run_id="local_cwd://tether/a") == ["local_cwd://tether/c"]
    assert tracker.run_ids(parent_run_id="local_cwd://tether/b") == []
    with pytest.raises(ValueError, match="allowed: parent_run_id"):
        tracker.run_ids(experiment="x")


def test_parent_with_two_children_lineage(tracker: FsspecTracker) -> None:
    root, parent = "pipeline://nightly/7", "local_cwd://tether/prep-1"
    kids = ["local_cwd://tether/train-1", "local_cwd://tether/train-2"]
    tracker.add_source(parent, root)
    tracker.add_artifact(parent, "dataset", "/data/ds")
    for i, kid in enumerate(kids):
        tracker.add_source(kid, parent, "dataset")
        tracker.add_artifact(kid, "model", f"/models/{i}.pt")

    lin = tracker.lineage(parent)
    assert lin.run_id == parent
    assert lin.artifacts == {"dataset": TrackerArtifact("dataset", "/data/ds")}
    assert [p.run_id for p in lin.parents] == [root]
    assert [c.run_id for c in lin.children] == kids
    assert lin.children[1].artifacts["model"].path == "/models/1.pt"

    up = tracker.lineage(kids[0])
    assert [p.run_id for p in up.parents] == [parent]
    assert up.parents[0].via_artifacts == ["dataset"]
    assert [p.run_id for p in up.parents[0].parents] == [root]
    assert up.children == []


def test_lineage_cuts_cycles(tracker: FsspecTracker) -> None:
    tracker.add_source("run://a", "run://b")
    tracker.add_source("run://b", "run://a")
    lin = tracker.lineage("run://a")
    assert [p.run_id for p in lin.parents] == ["run://b"]
    assert lin.parents[0].parents == []
    assert [c.run_id for c in lin.children] == ["run://b"]
    assert lin.children[0].children == []


@pytest.mark.parametrize(
    "run_id",
    ["k8s://default/ns:job-1", "a b/c?d#e%f~g.h", "ünïcode://ß/ø", "x" * 400, "..", "."],
)
def test_odd_run_ids_round_trip(tracker: FsspecTracker, run_id: str) -> None:
    name = encode_run_id(run_id)
    assert "/" not in name and not name.startswith(".") and len(name) <= 200
    assert decode_run_id(name) in (run_id, None)
    tracker.add_metadata(run_id, ok=True)
    tracker.add_source("child://1", run_id)
    assert tracker.run_ids() == sorted([run_id, "child://1"])
    assert tracker.metadata(run_id) == {"ok": True}
    assert tracker.run_ids(parent_run_id=run_id) == ["child://1"]


def test_store_layout_is_one_file_per_write(tmp_path: Path) -> None:
    tracker = create(str(tmp_path / "store"))
    tracker.add_metadata(RUN, a=1)
    tracker.add_metadata(RUN, b=2)
    tracker.add_artifact(RUN, "model", "/m.pt")
    tracker.add_source(RUN, "parent://p")
    run_dir = tmp_path / "store" / "runs" / "local_cwd%3A%2F%2Ftether%2Ftrain-x1y2"
    assert json.loads((run_dir / "run.json").read_text())["run_id"] == RUN
    assert len(list((run_dir / "metadata").glob("*.json"))) == 2
    assert len(list((run_dir / "artifacts").glob("*.json"))) == 1
    assert len(list((run_dir / "sources").glob("*.json"))) == 1
    marker = tmp_path / "store" / "children" / "parent%3A%2F%2Fp" / run_dir.name
    assert marker.is_file()
    assert not list(tmp_path.rglob(".*.tmp"))


def test_default_store_is_in_the_state_dir(tmp_path: Path) -> None:
    tracker = create(None)
    tracker.add_metadata(RUN, a=1)
    assert (tmp_path / "state" / "tracker" / "runs").is_dir()


def test_concurrent_threads_lose_no_writes(tracker: FsspecTracker) -> None:
    def work(i: int) -> None:
        for j in range(10):
            tracker.add_metadata(RUN, **{f"k{i}_{j}": j})
        tracker.add_artifact(RUN, f"art{i}", f"/a/{i}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    md = tracker.metadata(RUN)
    assert len(md) == 80 and md["k7_9"] == 9
    assert sorted(tracker.artifacts(RUN)) == sorted(f"art{i}" for i in range(8))
    assert tracker.run_ids() == [RUN]


def test_concurrent_processes_lose_no_writes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    code = f"""
        import os
        from tether.tracker.backend.fsspec import create
        t = create({str(store)!r})
        rank = os.environ["RANK"]
        t.ensure_run({RUN!r})
        for j in range(20):
            t.add_metadata({RUN!r}, **{{f"r{{rank}}_{{j}}": j, "shared": rank}})
        t.add_artifact({RUN!r}, f"ckpt-{{rank}}", f"/ckpt/{{rank}}")
        t.add_source({RUN!r}, "pipeline://p")
    """
    procs = [start_python(code, {"RANK": str(r)}) for r in range(6)]
    wait_all(procs)
    tracker = create(str(store))
    md = tracker.metadata(RUN)
    assert sum(1 for k in md if k != "shared") == 120
    assert md["shared"] in {str(r) for r in range(6)}
    assert len(tracker.artifacts(RUN)) == 6
    assert list(tracker.sources(RUN)) == [TrackerSource("pipeline://p")]
    assert tracker.run_ids() == [RUN]
    assert tracker.run_ids(parent_run_id="pipeline://p") == [RUN]
