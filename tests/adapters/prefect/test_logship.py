"""The log cursor of a re-attaching Prefect task: what the Prefect API holds, counted.

An attempt that re-attaches to a job skips as many lines of each replica as the session's
real Prefect server holds under the job's logger name (:func:`shipped_cursor`): nothing is
saved besides the lines. The end-to-end case (a flow-run process killed with SIGKILL, its
rerun resuming the job's log) is ``test_resilience.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tether.adapters.prefect import logship
from tether.adapters.prefect.logship import LogShipper, job_logger_name, shipped_cursor

pytestmark = pytest.mark.usefixtures("prefect_test")


def _flow_run(client: Any) -> Any:
    from prefect import flow

    @flow(name="tether-logship")
    def nothing() -> None:
        """Only a flow run for the lines to belong to."""

    return client.create_flow_run(nothing).id


def _ship(client: Any, flow_run_id: Any, handle: str, lines: list[str]) -> list[dict[str, Any]]:
    """Ships ``lines`` of job ``handle`` as a task does; returns the records it sent."""
    sent: list[dict[str, Any]] = []

    class Recording:
        def create_logs(self, payload: list[dict[str, Any]]) -> None:
            client.create_logs(payload)
            sent.extend(payload)

    shipper = LogShipper(Recording(), flow_run_id, None, handle)
    for line in lines:
        shipper(line)
    shipper.close()
    return sent


def test_a_reattach_counts_each_line_prefect_holds_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.client.orchestration import get_client

    handle, other = f"local_cwd://tether/job-{uuid.uuid4().hex}", "local_cwd://tether/other"
    with get_client(sync_client=True) as client:
        flow_run_id = _flow_run(client)
        first = _ship(client, flow_run_id, handle,
                      [f"main/0 line {i}" for i in range(5)] + ["main/1 only line"])
        # a batch Prefect stored although its sender did not hear back, then sent again
        client.create_logs(first[-3:])
        _ship(client, flow_run_id, handle, ["main/0 line 5", "main/0 line 6"])
        # another job's lines, and a line of another logger that names this job's logger
        _ship(client, flow_run_id, other, ["main/0 not mine", "main/1 not mine"])
        client.create_logs([{
            "name": "prefect.task_runs", "level": 20, "flow_run_id": str(flow_run_id),
            "message": f"main/0 a user printed {job_logger_name(handle)}",
            "timestamp": first[0]["timestamp"],
        }])
        for page in (1, 2, 3, 200):  # pages ending inside runs of equal timestamps
            monkeypatch.setattr(logship, "READ_PAGE", page)
            cursor = shipped_cursor(client, flow_run_id, handle)
            assert cursor.seen == {"main/0": 7, "main/1": 1}, page
        assert shipped_cursor(client, flow_run_id, other).seen == {"main/0": 1, "main/1": 1}
        assert shipped_cursor(client, flow_run_id, "local_cwd://tether/none").seen == {}


def test_a_line_after_a_quiet_spell_is_sent_before_the_job_ends() -> None:
    from prefect.client.orchestration import get_client

    handle = f"local_cwd://tether/job-{uuid.uuid4().hex}"
    with get_client(sync_client=True) as client:
        flow_run_id = _flow_run(client)
        shipper = LogShipper(client, flow_run_id, None, handle)
        shipper("main/0 the only line")  # no close(): the task is still following the job
        assert shipper.sent == 1
        assert shipped_cursor(client, flow_run_id, handle).seen == {"main/0": 1}
        shipper("main/0 right after")  # within BATCH_SECONDS of the last request: batched
        assert shipper.sent == 1
        shipper.close()
        assert shipped_cursor(client, flow_run_id, handle).seen == {"main/0": 2}


def test_a_task_writes_its_jobs_lines_and_no_cursor_variable() -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client

    from tether.adapters.prefect import component_task

    sh = component_task("utils.sh", scheduler="local_cwd")
    marker = uuid.uuid4().hex

    @flow
    def one() -> str:
        return sh(f"echo first {marker}; echo second {marker}").app_handle

    state = one(return_state=True)
    assert state.is_completed(), state.message
    handle = state.result()
    with get_client(sync_client=True) as client:
        flow_run_id = state.state_details.flow_run_id
        assert shipped_cursor(client, flow_run_id, handle).seen == {"sh/0": 2}
        assert not [v.name for v in client.read_variables() if v.name.startswith("tether")]
