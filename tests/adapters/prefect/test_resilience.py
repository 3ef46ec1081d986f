"""Crashes, reruns, orphans and log volume, against the session's real Prefect server.

The flow processes are real Python processes running existing flow runs (``crash_flow.py``)
the way a worker's flow-run process does. No Prefect worker runs here: where a process
worker would mark a killed flow-run process's run CRASHED, and where the UI's Retry button
puts the run back to ``AwaitingRetry``, the test makes the same state changes through the
API, then runs the flow run again in a new process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.prefect.conftest import pid_alive, wait_for_logs, wait_until
from tether.runner import get_runner
from tether.specs import AppState

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test")]

SCRIPT = Path(__file__).with_name("crash_flow.py")
PROCESS_DEADLINE_S = 300
"""How long a flow process may take for its flow, job included (generous: a busy machine)."""

EXIT_AFTER_FLOW_S = 60
"""How long a flow process may take to exit once its flow returned. Normally well under
a second (Prefect drains its log and event workers); the bug it guards against held the
process about 7 minutes (a daemon log thread draining a backlog), so 60 s separates the
two with a wide margin under load."""


def _create_flow_run(name: str, **parameters: Any) -> Any:
    from prefect.client.orchestration import get_client

    from tests.adapters.prefect import crash_flow

    with get_client(sync_client=True) as client:
        return client.create_flow_run(crash_flow.FLOWS[name], parameters=parameters).id


def _start(flow_run_id: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(flow_run_id)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _finish(proc: subprocess.Popen[bytes]) -> str:
    out, _ = proc.communicate(timeout=PROCESS_DEADLINE_S)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-5000:]
    return text


def _result(text: str) -> Any:
    (line,) = [x for x in text.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


def _set_state(flow_run_id: Any, state: Any) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, state, force=True)


def _flow_state(flow_run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).state


def _apps() -> list[Any]:
    with get_runner() as runner:
        return runner.list("local_cwd")


def _kill_9_mid_job(tmp_path: Path, marker: str) -> tuple[Any, Path, int]:
    """Starts a crashy flow run, waits until its job runs and its first line is in Prefect,
    kills the flow-run process with SIGKILL and marks the run CRASHED (the worker's part)."""
    from prefect.states import Crashed

    pidfile, release = tmp_path / "pid", tmp_path / "release"
    flow_run_id = _create_flow_run("tether-crashy", pidfile=str(pidfile), release=str(release),
                                   marker=marker)
    proc = _start(flow_run_id)
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 90, "the job to start")
        wait_for_logs(flow_run_id, f"waiting {marker}", timeout=30)
        (app,) = _apps()
        assert app.job_key
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    _set_state(flow_run_id, Crashed(message="Flow run infrastructure exited with signal -9."))
    job_pid = int(pidfile.read_text())
    assert pid_alive(job_pid), "the job should outlive its flow-run process"
    return flow_run_id, release, job_pid


def test_kill_9_then_retry_of_the_flow_run_reattaches_to_the_one_job(tmp_path: Path) -> None:
    from prefect.states import AwaitingRetry

    marker = f"tether-crash-{uuid.uuid4().hex}"
    flow_run_id, release, job_pid = _kill_9_mid_job(tmp_path, marker)

    _set_state(flow_run_id, AwaitingRetry(message="Retry from the UI"))
    proc = _start(flow_run_id)
    try:
        wait_for_logs(flow_run_id, "re-attached to tether job", timeout=90)
        release.touch()
        text = _finish(proc)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert _result(text) == job_pid  # the result of the job launched before the crash
    assert _flow_state(flow_run_id).is_completed()
    apps = _apps()
    assert len(apps) == 1, apps  # exactly one job: the rerun did not submit a duplicate
    assert apps[0].state == AppState.SUCCEEDED
    msgs = wait_for_logs(flow_run_id, f"released {marker}")
    # the rerun resumed the job's log after the lines the killed run had shipped
    assert sum(f"waiting {marker}" in m for m in msgs) == 1, msgs
    assert any("already shown" in m for m in msgs)


def test_a_new_flow_run_runs_a_new_job(tmp_path: Path) -> None:
    marker = f"tether-new-{uuid.uuid4().hex}"
    pids = []
    for i in range(2):
        pidfile, release = tmp_path / f"pid{i}", tmp_path / f"release{i}"
        release.touch()
        flow_run_id = _create_flow_run("tether-crashy", pidfile=str(pidfile),
                                       release=str(release), marker=marker)
        pids.append(_result(_finish(_start(flow_run_id))))
    apps = _apps()
    assert len(apps) == 2 and len({a.job_key for a in apps}) == 2, apps
    assert pids[0] != pids[1]


def test_reap_cancels_the_jobs_of_a_crashed_flow_run_only(tmp_path: Path) -> None:
    from tether.adapters.prefect.reap import main

    marker = f"tether-reap-{uuid.uuid4().hex}"
    flow_run_id, release, job_pid = _kill_9_mid_job(tmp_path, marker)
    # a job of a flow run that is still running is left alone
    other = tmp_path / "other"
    other.mkdir()
    live_id = _create_flow_run("tether-crashy", pidfile=str(other / "pid"),
                               release=str(other / "release"), marker=marker + "-live")
    live = _start(live_id)
    try:
        wait_until(lambda: (other / "pid").exists() and (other / "pid").read_text(), 90,
                   "the live job to start")
        rc = subprocess.run(
            [sys.executable, "-m", "tether.adapters.prefect.reap", "-s", "local_cwd"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
        )
        out = rc.stdout.decode(errors="replace")
        assert rc.returncode == 0, out
        assert f"(flow run {flow_run_id} is CRASHED)" in out, out
        assert str(live_id) not in out, out
        wait_until(lambda: not pid_alive(job_pid), 30, "the orphaned job to stop")
        states = {a.state for a in _apps()}
        assert AppState.CANCELLED in states and AppState.RUNNING in states, _apps()
        assert main(["-s", "local_cwd", "--dry-run"]) == 0  # nothing left to reap
        (other / "release").touch()
        assert _result(_finish(live)) == int((other / "pid").read_text())
    finally:
        (other / "release").touch()
        release.touch()
        if live.poll() is None:
            live.kill()
            live.communicate()


def test_reap_rejects_an_unknown_state_with_a_close_match() -> None:
    from tether.adapters.prefect.reap import ReapError, reap

    with pytest.raises(ReapError, match=r"unknown flow run state 'CRASHD' \(did you mean CRASHED"):
        reap(["local_cwd"], states=["CRASHD"])


def test_a_chatty_job_delivers_every_line_in_order_and_the_process_exits() -> None:
    lines = 12_000
    marker = f"tether-chatty-{uuid.uuid4().hex}"
    flow_run_id = _create_flow_run("tether-chatty", lines=lines, marker=marker)
    proc = _start(flow_run_id)
    out: list[str] = []
    flow_done = threading.Event()
    assert proc.stdout is not None
    stdout = proc.stdout

    def read() -> None:
        for raw in stdout:
            out.append(raw.decode(errors="replace"))
            if out[-1].startswith("RESULT "):
                flow_done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # the job's own work (12,000 lines through the API) may take long on a busy machine
        assert flow_done.wait(PROCESS_DEADLINE_S), "".join(out)[-5000:]
        # the behaviour: once the flow has returned, nothing holds the process (it used to
        # linger ~7 minutes while a daemon log thread drained its backlog)
        returned = time.monotonic()
        try:
            proc.wait(EXIT_AFTER_FLOW_S)
            print(f"flow-run process exited {time.monotonic() - returned:.2f} s after its flow")
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the flow-run process still runs {EXIT_AFTER_FLOW_S} s after its flow "
                f"returned: {''.join(out)[-3000:]}"
            ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    text = "".join(out)
    assert proc.returncode == 0, text[-5000:]
    (threads,) = [x for x in text.splitlines() if x.startswith("THREADS ")]
    assert not [t for t in json.loads(threads[len("THREADS "):]) if "tether" in t], threads
    # every line is in the API once the process has exited: nothing is left to drain
    got = [m for m in _all_logs(flow_run_id) if m.endswith(marker) and "chatty line" in m]
    assert len(got) == lines, (len(got), got[-3:])
    assert got == [f"python/0 chatty line {i:05d} {marker}" for i in range(lines)]


def _all_logs(flow_run_id: Any) -> list[str]:
    """Every log message of the flow run, paging through the API (it caps one page)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    out: list[str] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                sort=LogSort.TIMESTAMP_ASC, limit=200, offset=len(out),
            )
            out.extend(entry.message for entry in page)
            if len(page) < 200:
                return out


def test_flow_retry_takes_the_finished_jobs_result_without_repeating_its_logs(
    tmp_path: Path,
) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd")
    sh = component_task("utils.sh", scheduler="local_cwd")
    marker = tmp_path / "second-attempt"
    first_code = "import os\nprint('first job line', os.getpid(), flush=True)\n"

    @flow(retries=1, retry_delay_seconds=0)
    def retried() -> list[str]:
        a = py(c=first_code)
        b = sh(f"if [ -e {marker} ]; then echo ok; else touch {marker}; exit 1; fi")
        return [a.app_handle, b.app_handle]

    state = retried(return_state=True)
    assert state.is_completed(), state.message
    first_handle, _ = state.result()
    apps = _apps()
    # the first job ran once (its result was taken on the flow retry); the second twice
    assert sorted(a.state.name for a in apps) == ["FAILED", "SUCCEEDED", "SUCCEEDED"], apps
    assert sum(first_handle.endswith(a.app_id) for a in apps) == 1
    flow_run_id = state.state_details.flow_run_id
    msgs = wait_for_logs(flow_run_id, f"re-attached to tether job {first_handle}")
    assert sum("python/0 first job line" in m for m in msgs) == 1, msgs
