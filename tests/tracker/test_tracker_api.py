"""The tracker data model, validation and the lineage tree."""

from __future__ import annotations

import pytest

from tether.tracker import Lineage, TrackerArtifact, format_lineage_tree, tracker_config_env
from tether.tracker.api import check_metadata, check_run_id, check_run_id_filters


def test_tracker_config_env_names() -> None:
    assert tracker_config_env("fsspec") == "TETHER_TRACKER_FSSPEC_CONFIG"
    assert tracker_config_env("my-tracker.v2") == "TETHER_TRACKER_MY_TRACKER_V2_CONFIG"


def test_tracker_config_env_matches_runner() -> None:
    from tether.runner import tracker_config_env as runner_env

    for name in ("fsspec", "mlflow", "my-tracker.v2"):
        assert tracker_config_env(name) == runner_env(name)


def test_metadata_key_and_value_errors_say_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="metadata key 'a b' is not allowed: use 1-200 letters"):
        check_metadata({"a b": 1})
    with pytest.raises(ValueError, match="metadata 'obj' is not JSON-serializable"):
        check_metadata({"obj": object()})
    assert check_metadata({"lr": 0.1, "tags": ["a"], "x.y-z_1": None}) == {
        "lr": 0.1,
        "tags": ["a"],
        "x.y-z_1": None,
    }


def test_run_id_and_filter_errors() -> None:
    with pytest.raises(ValueError, match="is empty"):
        check_run_id(" ")
    with pytest.raises(ValueError, match=r"unknown run_ids filter.*allowed: parent_run_id"):
        check_run_id_filters({"parent": "x"})
    assert check_run_id_filters({"parent_run_id": "p"}) == "p"


def test_format_lineage_tree() -> None:
    lin = Lineage(
        run_id="local_cwd://tether/train-1",
        artifacts={"model": TrackerArtifact("model", "/data/model.pt")},
        parents=[
            Lineage(
                "airflow://etl/run-7",
                artifacts={"data": TrackerArtifact("data", "s3://b/data")},
                parents=[Lineage("cron://nightly")],
                via_artifacts=["data"],
            )
        ],
        children=[
            Lineage(
                "local_cwd://tether/eval-1",
                artifacts={"metrics": TrackerArtifact("metrics", "/m.json")},
                children=[Lineage("local_cwd://tether/report-1")],
            ),
            Lineage("local_cwd://tether/eval-2"),
        ],
    )
    assert format_lineage_tree(lin) == "\n".join(
        [
            "local_cwd://tether/train-1",
            "├── artifacts",
            "│   └── model: /data/model.pt",
            "├── parents",
            "│   └── airflow://etl/run-7  (used: data)",
            "│       ├── artifacts",
            "│       │   └── data: s3://b/data",
            "│       └── parents",
            "│           └── cron://nightly",
            "└── children",
            "    ├── local_cwd://tether/eval-1",
            "    │   ├── artifacts",
            "    │   │   └── metrics: /m.json",
            "    │   └── children",
            "    │       └── local_cwd://tether/report-1",
            "    └── local_cwd://tether/eval-2",
        ]
    )


def test_format_lineage_tree_of_a_lone_run() -> None:
    assert format_lineage_tree(Lineage("local://me/x")) == "local://me/x"


def test_rank_reads_the_replica_env_of_the_one_replica_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.schedulers import replica
    from tether.tracker import sync

    assert sync.ENV_REPLICA_ID is replica.ENV_REPLICA_ID  # one definition, not a copy
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv(replica.ENV_REPLICA_ID, "3")
    assert sync.process_rank() == 3 and not sync.is_rank0()
