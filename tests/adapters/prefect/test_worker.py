"""A real Prefect process worker runs deployed flow runs: crash, retry and cancellation.

The worker (``prefect worker start --type process``, started here by PID against the
session's server) launches each flow run in its own process, marks a run whose process
died ``Crashed``, and stops the process of a run that is cancelled. The UI's Retry button is
the one thing done through the API instead (it puts the run back to ``AwaitingRetry``).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.prefect.conftest import (
    flow_run_logs,
    pid_alive,
    wait_for_logs,
    wait_until,
)
from tests.e2e.infra.prefect import ProcessWorker, start_worker
from tether.runner import get_runner
from tether.specs import AppState

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test")]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[ProcessWorker, Any]]:
    """A process worker and a deployment of ``crash_flow.py:crashy`` in its pool."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from tests.adapters.prefect import crash_flow

    pool = f"tether-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = client.create_flow(crash_flow.crashy)
        deployment_id = client.create_deployment(
            flow_id, f"{pool}-crashy", work_pool_name=pool,
            entrypoint="crash_flow.py:crashy",
            pull_steps=[{"prefect.deployments.steps.set_working_directory":
                         {"directory": str(HERE)}}],
        )
    pythonpath = os.pathsep.join([str(REPO / "core"), str(REPO / "adapters"), str(REPO)])
    proc = start_worker(tmp_path / "worker", pool, {"PYTHONPATH": pythonpath})
    try:
        yield proc, deployment_id
    finally:
        proc.stop()
        with get_runner() as runner:  # never leave a job behind
            for app in runner.list("local_cwd"):
                if not app.state.is_terminal():
                    runner.cancel(app.app_handle)


def _run_deployment(deployment_id: Any, **parameters: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.create_flow_run_from_deployment(deployment_id, parameters=parameters).id


def _state(flow_run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).state


def _apps() -> list[Any]:
    with get_runner() as runner:
        return runner.list("local_cwd")


def _wait_state(flow_run_id: Any, check: Any, what: str, worker: ProcessWorker) -> Any:
    try:
        return wait_until(lambda: check(_state(flow_run_id)), 120, what)
    except AssertionError:
        raise AssertionError(f"{what}: state {_state(flow_run_id)}; worker log:\n"
                             f"{worker.log()[-4000:]}") from None


def test_worker_kill_9_then_retry_runs_exactly_one_job(
    tmp_path: Path, worker: tuple[ProcessWorker, Any]
) -> None:
    from prefect.states import AwaitingRetry

    proc, deployment_id = worker
    marker = f"tether-worker-{uuid.uuid4().hex}"
    pidfile, release, flow_pid = tmp_path / "pid", tmp_path / "release", tmp_path / "flowpid"
    flow_run_id = _run_deployment(deployment_id, pidfile=str(pidfile), release=str(release),
                                  marker=marker, flow_pidfile=str(flow_pid))
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 120,
                   f"the job to start; worker log:\n{proc.log()[-3000:]}")
        os.kill(int(flow_pid.read_text()), signal.SIGKILL)
        # the worker sees its flow-run process die and marks the run Crashed
        _wait_state(flow_run_id, lambda s: s is not None and s.is_crashed(), "Crashed", proc)
        job_pid = int(pidfile.read_text())
        assert pid_alive(job_pid)

        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:

            def retried() -> bool:
                # the UI's Retry. The flow-run runner reports the crash at once and the worker
                # sometimes reports it again a moment later: a retry set in between is
                # overwritten by Crashed, and then (like a user) the test retries again
                state = client.read_flow_run(flow_run_id).state
                if state is not None and state.is_crashed():
                    client.set_flow_run_state(
                        flow_run_id, AwaitingRetry(message="Retry from the UI"), force=True
                    )
                return any("re-attached to tether job" in m for m in flow_run_logs(flow_run_id))

            wait_until(retried, 120, f"the retry to re-attach; logs: {flow_run_logs(flow_run_id)}")
        release.touch()
        _wait_state(flow_run_id, lambda s: s is not None and s.is_completed(), "Completed", proc)
    finally:
        release.touch()
    apps = _apps()
    assert len(apps) == 1, apps  # exactly one job across the crash and the retry
    assert apps[0].state == AppState.SUCCEEDED
    wait_for_logs(flow_run_id, f"released {marker}")


def test_cancelling_a_worker_flow_run_leaves_no_running_job(
    tmp_path: Path, worker: tuple[ProcessWorker, Any]
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    proc, deployment_id = worker
    marker = f"tether-wcancel-{uuid.uuid4().hex}"
    pidfile, release = tmp_path / "pid", tmp_path / "release"
    flow_run_id = _run_deployment(deployment_id, pidfile=str(pidfile), release=str(release),
                                  marker=marker)
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 120,
                   f"the job to start; worker log:\n{proc.log()[-3000:]}")
        job_pid = int(pidfile.read_text())
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(flow_run_id, Cancelling(), force=True)
        _wait_state(flow_run_id, lambda s: s is not None and s.is_cancelled(), "Cancelled", proc)
        wait_until(lambda: not pid_alive(job_pid), 60, "the job to stop")
    finally:
        release.touch()
    apps = _apps()
    assert [a.state for a in apps] == [AppState.CANCELLED], apps
    # the user's cancel, not a crash: the tether task run ends CANCELLED too
    with get_client(sync_client=True) as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    assert [r.state.type.value for r in runs if r.state] == ["CANCELLED"], [
        (r.name, r.state) for r in runs]
