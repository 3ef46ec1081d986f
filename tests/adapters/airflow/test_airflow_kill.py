"""Crashes and kills: the worker dies after submitting (re-attach, no duplicate job), and a
killed task cancels its job (no process left). The DAG runs in a real subprocess."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from airflow_testlib import (
    HERE,
    clear_tasks,
    continue_run,
    fail_for_retry,
    run_dag,
    run_id_for,
    task_states,
    xcoms,
)

from tether.adapters.airflow import task_job_key
from tether.runner import get_runner
from tether.specs import AppState

# real Airflow workers in subprocesses: generous deadlines under a busy machine
pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]


def _when() -> dt.datetime:
    return dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9
    )


def _start(
    dag_id: str, conf: dict[str, object], when: dt.datetime, log: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "airflow_testlib.py"), dag_id, "--conf", json.dumps(conf),
         "--when", when.isoformat()],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=dict(os.environ),
    )


def _wait_for_job(key: str, pidfile: Path, proc: subprocess.Popen[bytes], log: Path,
                  timeout: float = 420.0) -> tuple[str, int]:
    """Waits until the task's job runs (found by its job key) and its command started."""
    deadline = time.monotonic() + timeout
    with get_runner() as runner:
        while time.monotonic() < deadline:
            found = runner.find_job("local_cwd", key)
            if found is not None and found.status.state == AppState.RUNNING and pidfile.exists():
                text = pidfile.read_text().strip()
                if text:
                    return found.app_handle, int(text)
            assert proc.poll() is None, f"the DAG run ended early:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
    raise AssertionError(f"no running job with key {key}:\n{log.read_text()[-3000:]}")


def _jobs_of(dag_id: str, run_id: str, task_id: str = "long") -> list[str]:
    """The jobs of any try of the task instance."""
    keys = {task_job_key(dag_id, run_id, task_id, -1, t) for t in range(1, 6)}
    with get_runner() as runner:
        return [a.app_handle for a in runner.list("local_cwd") if a.job_key in keys]


def _group_alive(pgid: int) -> list[int]:
    """Processes of a process group that are still alive (zombies excluded)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


def test_worker_killed_after_submit_reattaches_without_duplicate(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    when = _when()
    run_id = run_id_for(when)
    key = task_job_key("tether_t_long_retry", run_id, "long", -1, 1)
    pidfile = tmp_path / "pid"
    gate = tmp_path / "gate"
    conf = {"pidfile": str(pidfile), "gate": str(gate), "seconds": 60}
    log = tmp_path / "worker1.log"

    worker = _start("tether_t_long_retry", conf, when, log)
    try:
        handle, _ = _wait_for_job(key, pidfile, worker, log)
    finally:
        worker.send_signal(signal.SIGKILL)  # the worker dies hard: no on_kill, no cleanup
        worker.wait(timeout=120)
    assert worker.returncode == -signal.SIGKILL

    # the job survived its launcher
    with get_runner() as runner:
        status = runner.status(handle)
    assert status is not None and status.state == AppState.RUNNING, status

    # Airflow fails the try that lost its worker and runs the next one in the same DAG run;
    # the job finishes only after that try started (see the DAG's on_execute_callback)
    fail_for_retry("tether_t_long_retry", run_id, "long")
    capfd.readouterr()
    dr = continue_run("tether_t_long_retry", run_id)
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"long": "success"}
    assert f"re-attached to tether job {handle} (RUNNING) launched by try 1" in text
    x = xcoms("tether_t_long_retry", run_id, "long")
    assert x["app_handle"] == handle  # re-attached to the job the killed worker launched
    assert x["return_value"] == {"done": True}
    assert _jobs_of("tether_t_long_retry", run_id) == [handle]  # and launched no second one


def test_clear_while_running_leaves_the_job_to_the_next_try(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    when = _when()
    run_id = run_id_for(when)
    key = task_job_key("tether_t_long_retry", run_id, "long", -1, 1)
    pidfile = tmp_path / "pid"
    conf = {"pidfile": str(pidfile), "gate": str(tmp_path / "gate"), "seconds": 60}
    log = tmp_path / "worker1.log"
    worker = _start("tether_t_long_retry", conf, when, log)
    try:
        handle, _ = _wait_for_job(key, pidfile, worker, log)
        # the try is following its job (it pushed the handle: it is past its Airflow calls)
        deadline = time.monotonic() + 60
        while xcoms("tether_t_long_retry", run_id, "long").get("app_handle") != handle:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        # a user clears the running task (Airflow's clear: the task instance is RESTARTING),
        # and the supervisor stops the try with SIGTERM, then SIGKILL
        clear_tasks("tether_t_long_retry", run_id, ["long"])
        worker.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        while "task killed: leaving tether job" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=120)
    assert "was cleared (restarting)" in log.read_text()
    with get_runner() as runner:
        status = runner.status(handle)
    assert status is not None and status.state == AppState.RUNNING, status

    fail_for_retry("tether_t_long_retry", run_id, "long")
    capfd.readouterr()
    dr = continue_run("tether_t_long_retry", run_id)
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"long": "success"}
    assert f"re-attached to tether job {handle} (RUNNING) launched by try 1" in text
    assert _jobs_of("tether_t_long_retry", run_id) == [handle]


def test_sigterm_on_the_task_cancels_the_job_and_leaves_no_process(tmp_path: Path) -> None:
    when = _when()
    key = task_job_key("tether_t_long", run_id_for(when), "long", -1, 1)
    pidfile = tmp_path / "pid"
    log = tmp_path / "worker.log"
    worker = _start("tether_t_long", {"pidfile": str(pidfile), "seconds": 120}, when, log)
    try:
        handle, pid = _wait_for_job(key, pidfile, worker, log)
        assert _group_alive(pid), "the job's command should be running"
        # SIGTERM is how Airflow stops a task; the task runner turns it into on_kill()
        worker.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        with get_runner() as runner:
            while time.monotonic() < deadline:
                status = runner.status(handle)
                if status is not None and status.is_terminal():
                    break
                time.sleep(0.1)
        assert status is not None and status.state == AppState.CANCELLED, status
        deadline = time.monotonic() + 60
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group_alive(pid) == [], "processes of the cancelled job are still running"
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert "task killed: cancelling tether job" in text, text[-3000:]


def test_execution_timeout_cancels_the_job(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    when = _when()
    dr = run_dag("tether_t_timeout", conf={"pidfile": str(pidfile)}, when=when)
    assert task_states(dr) == {"slow": "failed"}
    handle = xcoms("tether_t_timeout", dr.run_id, "slow")["app_handle"]
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.1, timeout=120)
    assert status is not None and status.state == AppState.CANCELLED, status
    pid = int(pidfile.read_text().strip())
    deadline = time.monotonic() + 60
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_alive(pid) == []


def test_execution_timeout_cancels_the_job_of_a_deferred_task(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    dr = run_dag("tether_t_timeout_deferred", conf={"pidfile": str(pidfile)}, when=_when())
    assert task_states(dr) == {"slow_deferred": "failed"}
    x = xcoms("tether_t_timeout_deferred", dr.run_id, "slow_deferred")
    with get_runner() as runner:
        status = runner.status(x["app_handle"])
    assert status is not None and status.state == AppState.CANCELLED, status
    pid = int(pidfile.read_text().strip())
    deadline = time.monotonic() + 60
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_alive(pid) == []
    # the trigger streamed the job's line while it ran and saved how far it got
    assert x["tether_log_cursor"] == {"sh/0": 1}
