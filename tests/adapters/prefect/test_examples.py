"""The Prefect example pipelines run as a user runs them: ``python examples/pipelines/...``.

The flow processes talk to the session's Prefect server (``PREFECT_API_URL`` from the
conftest) and run their jobs on ``local_cwd``; the tests then read the flow runs' task runs
and artifacts back from the API.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("prefect_test")

REPO = Path(__file__).resolve().parents[3]
PIPELINES = REPO / "examples" / "pipelines"
TRAIN_APP = REPO / "examples" / "apps" / "train_ddp.py"

needs_model_dir = pytest.mark.skipif(
    "--model-dir" not in TRAIN_APP.read_text(),
    reason="examples/apps/train_ddp.py does not take --model-dir yet",
)


def _run(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(PIPELINES / script), *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240,
    )
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:]
    return out


def _latest_flow_run(name: str) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[name])),
            sort=FlowRunSort.START_TIME_DESC, limit=1,
        )
        return run


def _summaries(flow_run_id: Any) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: str(a.data) for a in arts if a.key and a.key.startswith("tether-")}


@pytest.mark.slow
@needs_model_dir
def test_train_pipeline_prepare_ddp_train_evaluate(tmp_path: Path) -> None:
    out = _run("prefect_train.py", "--workdir", str(tmp_path), "--epochs", "2")
    assert "mse " in out
    assert (tmp_path / "model" / "model.pt").exists()
    # both DDP workers of the train job logged through the task run logger
    assert "[train_ddp0]:rank 0/2" in out and "[train_ddp1]:rank 1/2" in out
    run = _latest_flow_run("tether-train")
    assert run.state.is_completed()
    summaries = _summaries(run.id)
    steps = {"tether-prepare", "tether-train", "tether-evaluate"}
    # train_ddp.py reports its epochs (tether.runtime.report): the train task also has a
    # progress artifact and a metrics table
    assert set(summaries) == steps | {"tether-train-progress", "tether-train-metrics"}
    assert all("**SUCCEEDED**" in summaries[key] for key in steps)


@pytest.mark.slow
@needs_model_dir
def test_mapped_sweep_runs_one_job_per_learning_rate(tmp_path: Path) -> None:
    out = _run("prefect_mapped.py", "--workdir", str(tmp_path), "--lr", "0.001", "0.2")
    assert "best lr 0.2" in out
    for lr in ("0.001", "0.2"):
        assert (tmp_path / f"model-lr{lr}" / "model.pt").exists()
    from tether.runner import get_runner

    with get_runner() as runner:
        apps = runner.list("local_cwd")
    # prepare + 2 trials + 2 scores, each its own job with its own identity
    assert len(apps) == 5
    assert len({a.job_key for a in apps}) == 5


def test_resilient_example_caches_prepare_and_evaluates_concurrently(tmp_path: Path) -> None:
    from tether.runner import get_runner

    first = _run("prefect_resilient.py", "--workdir", str(tmp_path), "--thresholds", "0.2", "0.8")
    assert "threshold 0.2: score 0.799" in first and "threshold 0.8: score 0.190" in first
    second = _run("prefect_resilient.py", "--workdir", str(tmp_path), "--thresholds", "0.2", "0.8")
    assert "Cached" in second  # prepare's result came from the cache
    with get_runner() as runner:
        apps = runner.list("local_cwd")
    # run 1: prepare + 2 evaluations; run 2: 2 evaluations (a new flow run), prepare cached
    assert len(apps) == 5, apps


def test_resilient_example_killed_then_cancelled_leaves_jobs_that_reap_cancels(
    tmp_path: Path,
) -> None:
    """The walkthrough of docs/prefect.md: ``kill -9`` of the example's flow process while
    its evaluation jobs run, ``prefect flow-run cancel`` of the orphaned flow run (nobody is
    left to finish it: it stays CANCELLING), then ``tether prefect reap`` cancels the jobs."""
    import signal

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelling

    from tests.adapters.prefect.conftest import pid_alive, wait_until
    from tether.runner import get_runner
    from tether.specs import AppState

    def running_jobs() -> list[Any]:
        with get_runner() as runner:
            return [a for a in runner.list("local_cwd") if a.state == AppState.RUNNING]

    proc = subprocess.Popen(
        [sys.executable, str(PIPELINES / "prefect_resilient.py"), "--workdir", str(tmp_path),
         "--thresholds", "0.2", "0.8", "--job-seconds", "600"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        jobs = wait_until(lambda: len(running_jobs()) == 2 and running_jobs(), 120,
                          "the two evaluation jobs to run")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["tether-resilient"])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
            ),
        )
        # what `prefect flow-run cancel` does; no process is left to finish the cancellation
        client.set_flow_run_state(run.id, Cancelling(), force=True)
    assert len(running_jobs()) == 2, "a kill -9 of the flow process stops no job"
    reaped = subprocess.run(
        [sys.executable, "-m", "tether.adapters.prefect.reap", "-s", "local_cwd"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
    )
    out = reaped.stdout.decode(errors="replace")
    assert reaped.returncode == 0, out
    assert out.count(f"(flow run {run.id} is CANCELLING)") == 2, out
    wait_until(lambda: not running_jobs(), 60, "the reaped jobs to stop")
    with get_runner() as runner:
        for app in jobs:
            status = runner.status(app.app_handle)
            assert status is not None and status.state == AppState.CANCELLED, status
    assert not pid_alive(proc.pid)
