"""The query API behind ``tether tracker list ...``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.tracker import (
    TrackerArtifact,
    TrackerNotConfiguredError,
    UnknownArtifactError,
    UnknownRunError,
    format_lineage_tree,
    lineage,
    list_artifacts,
    list_jobs,
    list_metadata,
)
from tether.tracker.backend.fsspec import create

PARENT = "pipeline://nightly/7"
KIDS = ["local_cwd://tether/train-1", "local_cwd://tether/train-2"]


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store"
    monkeypatch.setenv("TETHER_TRACKERS", "fsspec")
    monkeypatch.setenv("TETHER_TRACKER_FSSPEC_CONFIG", str(store))
    tracker = create(str(store))
    tracker.add_metadata(PARENT, schedule="daily")
    for i, kid in enumerate(KIDS):
        tracker.add_source(kid, PARENT)
        tracker.add_metadata(kid, lr=0.1 * (i + 1), epochs=3)
        tracker.add_artifact(kid, "model", f"/models/{i}.pt")
        tracker.add_artifact(kid, "metrics", f"/metrics/{i}.json")
    return store


def test_missing_configuration_is_one_actionable_line() -> None:
    with pytest.raises(TrackerNotConfiguredError) as info:
        list_jobs()
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("no tracker configured: set TETHER_TRACKERS")
    assert "[tether:tracker]" in msg


def test_list_jobs_and_children(store: Path) -> None:
    assert list_jobs() == [*KIDS, PARENT]
    assert list_jobs(parent_run_id=PARENT) == KIDS
    assert list_jobs(parent_run_id=KIDS[0]) == []


def test_list_metadata(store: Path) -> None:
    assert list_metadata(KIDS[1]) == {"epochs": 3, "lr": pytest.approx(0.2)}
    with pytest.raises(UnknownRunError, match=r"did you mean local_cwd://tether/train-1"):
        list_metadata("local_cwd://tether/train-11")


def test_list_artifacts(store: Path) -> None:
    assert list(list_artifacts(KIDS[0])) == ["metrics", "model"]
    assert list_artifacts(KIDS[0], artifact="model") == {
        "model": TrackerArtifact("model", "/models/0.pt")
    }
    with pytest.raises(UnknownArtifactError, match=r"no artifact 'modle'; did you mean model\?"):
        list_artifacts(KIDS[0], artifact="modle")


def test_lineage_tree_of_a_parent_with_two_children(store: Path) -> None:
    assert format_lineage_tree(lineage(PARENT)) == "\n".join(
        [
            PARENT,
            "└── children",
            f"    ├── {KIDS[0]}",
            "    │   └── artifacts",
            "    │       ├── metrics: /metrics/0.json",
            "    │       └── model: /models/0.pt",
            f"    └── {KIDS[1]}",
            "        └── artifacts",
            "            ├── metrics: /metrics/1.json",
            "            └── model: /models/1.pt",
        ]
    )
    child = lineage(KIDS[0])
    assert [p.run_id for p in child.parents] == [PARENT]


def test_lineage_of_an_unknown_run(store: Path) -> None:
    with pytest.raises(UnknownRunError, match="is not in tracker"):
        lineage("nope://x")


def test_several_trackers_are_merged(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("TETHER_TRACKERS", "fsspec,mlflow")
    monkeypatch.setenv("TETHER_TRACKER_MLFLOW_CONFIG", uri)
    from tether.tracker.backend.mlflow import create as create_mlflow

    create_mlflow(uri).add_metadata("mlflow://only", source="mlflow")
    create_mlflow(uri).add_metadata(KIDS[0], lr=99, extra=True)
    assert list_jobs() == sorted([*KIDS, PARENT, "mlflow://only"])
    assert list_metadata(KIDS[0]) == {"epochs": 3, "extra": True, "lr": 0.1}  # fsspec first
    assert list_metadata("mlflow://only") == {"source": "mlflow"}
