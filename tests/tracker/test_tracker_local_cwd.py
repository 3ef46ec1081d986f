"""Tracking end to end: real jobs on the ``local_cwd`` scheduler, launched by the Runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tether.schedulers.local")

from tether.runner import get_runner
from tether.specs import AppDef, AppState, Role
from tether.tracker import (
    format_lineage_tree,
    lineage,
    list_artifacts,
    list_jobs,
    list_metadata,
)
from tether.tracker.backend.fsspec import create

JOB_CODE = """
import os
from tether.tracker import AppRun
run = AppRun.run_from_env()
rank = os.environ["TETHER_REPLICA_ID"]
run.add_metadata(**{"rank" + rank: int(rank)}, world_size=2)
run.add_artifact("ckpt-" + rank, "/ckpt/" + rank, {"rank": int(rank)})
if rank == "0":
    run.add_output("accuracy", 0.93)
    run.add_output("model_uri", "s3://bucket/model.pt")
"""


def _app(name: str, replicas: int, env: dict[str, str] | None = None) -> AppDef:
    role = Role(
        "trainer",
        image="",
        entrypoint=sys.executable,
        args=["-c", JOB_CODE],
        num_replicas=replicas,
        env=env or {},
    )
    return AppDef(name, [role])


def _configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trackers: str) -> Path:
    """A .tetherconfig naming the trackers, as a user would write it."""
    cfg = tmp_path / "project.tetherconfig"
    store = tmp_path / "tracker"
    lines = [
        "[tether:tracker]",
        *[f"{t} =" for t in trackers.split(",")],
        "",
        "[tracker:fsspec]",
        f"config = {store}",
        "",
        "[tracker:mlflow]",
        f"config = file://{tmp_path / 'mlruns'};experiment=e2e",
    ]
    cfg.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("TETHERCONFIG", str(cfg))
    return store


@pytest.mark.slow
@pytest.mark.parametrize("trackers", ["fsspec", "fsspec,mlflow"])
def test_two_rank_job_writes_one_run_and_outputs_come_back(
    trackers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _configure(tmp_path, monkeypatch, trackers)
    with get_runner() as runner:
        handle = runner.run(_app("train", 2), "local_cwd")
        status = runner.wait(handle, wait_interval=0.1, timeout=240)
        assert status is not None and status.state == AppState.SUCCEEDED, (
            status,
            "".join(runner.log_lines(handle, "trainer", 0)),
            "".join(runner.log_lines(handle, "trainer", 1)),
        )
        assert runner.outputs(handle) == {"accuracy": 0.93, "model_uri": "s3://bucket/model.pt"}

    # the run id is the app handle; both ranks wrote into that one run, in every backend
    assert list_jobs() == [handle]
    assert list_metadata(handle) == {"rank0": 0, "rank1": 1, "world_size": 2}
    assert sorted(list_artifacts(handle)) == ["ckpt-0", "ckpt-1"]
    assert list_artifacts(handle, "ckpt-1")["ckpt-1"].metadata == {"rank": 1}
    assert create(str(store)).run_ids() == [handle]
    if "mlflow" in trackers:
        from tether.tracker.backend.mlflow import create as create_mlflow

        mlflow_tracker = create_mlflow(f"file://{tmp_path / 'mlruns'}")
        assert list(mlflow_tracker.run_ids()) == [handle]
        assert mlflow_tracker.metadata(handle) == {"rank0": 0, "rank1": 1, "world_size": 2}
        from mlflow import MlflowClient

        client = MlflowClient(f"file://{tmp_path / 'mlruns'}")
        exp = client.get_experiment_by_name("e2e")
        assert exp is not None
        assert [r.info.run_name for r in client.search_runs([exp.experiment_id])] == [handle]


@pytest.mark.slow
def test_parent_run_with_two_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _configure(tmp_path, monkeypatch, "fsspec")
    parent = "pipeline://nightly/run-7"
    with get_runner() as runner:
        kids = [runner.run(_app(f"child{i}", 1), "local_cwd", parent_run_id=parent)
                for i in range(2)]
        for kid in kids:
            status = runner.wait(kid, wait_interval=0.1, timeout=240)
            assert status is not None and status.state == AppState.SUCCEEDED, status

    assert list_jobs(parent_run_id=parent) == sorted(kids)
    lin = lineage(parent)
    assert [c.run_id for c in lin.children] == sorted(kids)
    first, second = sorted(kids)
    assert format_lineage_tree(lin) == "\n".join(
        [
            parent,
            "└── children",
            f"    ├── {first}",
            "    │   └── artifacts",
            "    │       └── ckpt-0: /ckpt/0",
            f"    └── {second}",
            "        └── artifacts",
            "            └── ckpt-0: /ckpt/0",
        ]
    )
    assert [p.run_id for p in lineage(first).parents] == [parent]
