"""What a component task has on the Prefect server when the flow returns: the job summary and
the job's lines, read at once (no waiting), for a job that succeeded and one that failed; and
a summary the server does not take is reported in the task run's log, not lost silently.

The server is the session's real Prefect API. Two faults are injected into the client, since a
real server cannot be made to do either on cue: a slow server (the artifact requests, or the
log requests, wait ``SLOW_SECONDS`` before they are sent, so a write of that kind left running
when the task returns would be missing), and a summary request that fails as an unreachable
server's would.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.adapters.prefect.conftest import flow_run_logs, wait_for_logs
from tether.adapters.common import JobFailedError, JobResult

pytestmark = pytest.mark.usefixtures("prefect_test")

SLOW_SECONDS = 3.0
"""How long each slowed request waits before it is sent: longer than Prefect takes to end a
flow run after its last task returned (under a second here), so a write left running would
still be missing when the flow returns."""


def _slow_server(monkeypatch: pytest.MonkeyPatch, request: str) -> None:
    import time

    from prefect.client.orchestration import SyncPrefectClient

    real = getattr(SyncPrefectClient, request)

    def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_SECONDS)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SyncPrefectClient, request, slow)


def _summaries(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return [a for a in arts if a.type == "markdown"]


@pytest.mark.parametrize("slow", ["create_artifact", "create_logs"])
@pytest.mark.parametrize("exit_code", [0, 5])
def test_summary_and_lines_are_on_the_server_when_the_flow_returns(
    exit_code: int, slow: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    sh = component_task("utils.sh", scheduler="local_cwd", name="published")
    marker = uuid.uuid4().hex

    @flow
    def one() -> JobResult:
        return sh(f"echo 'first {marker}'; echo 'last {marker}'; exit {exit_code}")

    with monkeypatch.context() as slowed:
        _slow_server(slowed, slow)
        state = one(return_state=True)
    flow_run_id = state.state_details.flow_run_id
    # read right away: both were sent before the task returned
    (summary,) = _summaries(flow_run_id)
    logs = flow_run_logs(flow_run_id)
    if exit_code:
        assert state.is_failed()
        with pytest.raises(JobFailedError) as failed:
            state.result()
        handle = failed.value.result.app_handle
        assert "**FAILED**" in summary.data and "exited with code 5" in summary.data
    else:
        assert state.is_completed(), state.message
        handle = state.result().app_handle
        assert "**SUCCEEDED**" in summary.data
    assert handle in summary.data
    assert summary.task_run_id is not None
    assert f"sh/0 first {marker}" in logs and f"sh/0 last {marker}" in logs, logs


def test_a_summary_the_server_refuses_is_reported_in_the_task_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx
    from prefect import flow
    from prefect.client.orchestration import SyncPrefectClient

    from tether.adapters.prefect import component_task

    real = SyncPrefectClient.create_artifact

    def refuse_summaries(self: Any, artifact: Any) -> Any:
        if artifact.type == "markdown":
            raise httpx.ConnectError("connection refused (injected)")
        return real(self, artifact)

    monkeypatch.setattr(SyncPrefectClient, "create_artifact", refuse_summaries)
    sh = component_task("utils.sh", scheduler="local_cwd", name="unsummarized")

    @flow
    def one() -> JobResult:
        return sh("echo done")

    state = one(return_state=True)
    assert state.is_completed(), state.message  # the job's result stands
    handle = state.result().app_handle
    flow_run_id = state.state_details.flow_run_id
    assert _summaries(flow_run_id) == []
    wait_for_logs(flow_run_id, f"cannot create the summary artifact of {handle}: "
                               "connection refused (injected)")
