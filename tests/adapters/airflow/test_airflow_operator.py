"""ComponentOperator under real Airflow 3 (``dag.test()`` on sqlite) with local_cwd jobs."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest
from airflow_testlib import (
    clear_tasks,
    continue_run,
    run_dag,
    task_states,
    try_numbers,
    xcoms,
)

from tether.adapters.airflow import task_job_key
from tether.adapters.airflow.attempts import ENV_TRY_NUMBER
from tether.runner import get_runner
from tether.specs import AppState

pytestmark = pytest.mark.usefixtures("airflow_db")


def _when() -> dt.datetime:
    """A fresh, fixed logical date: the run id is known before the run starts."""
    return dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9
    )


def _jobs(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[str]:
    """The task instance's jobs, in the order of the tries that launched them."""
    keys = [task_job_key(dag_id, run_id, task_id, map_index, t) for t in range(1, 6)]
    with get_runner() as runner:
        found = {a.job_key: a.app_id for a in runner.list("local_cwd") if a.job_key in keys}
    return [found[k] for k in keys if k in found]


def test_success_streams_every_replica_and_pushes_xcoms(capfd: pytest.CaptureFixture[str]) -> None:
    when = _when()
    dr = run_dag("tether_t_logs", conf={"greeting": "bonjour"}, when=when)
    out = capfd.readouterr()
    text = out.out + out.err
    assert str(dr.state) == "success", task_states(dr)

    # the logs of both replicas are in the task log, prefixed role/replica, with the
    # templated param and env ({{ ds }}) rendered
    ds = when.strftime("%Y-%m-%d")
    assert f"sh/0 bonjour from replica 0 on {ds}" in text
    assert f"sh/1 bonjour from replica 1 on {ds}" in text
    assert "sh/1 second line of 1" in text
    # the job's tracking parent is the DAG run
    assert f"sh/0 parent=airflow:tether_t_logs/{dr.run_id}" in text

    x = xcoms("tether_t_logs", dr.run_id, "two_replicas")
    assert x["state"] == "SUCCEEDED"
    assert x["app_handle"].startswith("local_cwd://")
    assert "ui_url" in x
    # the job's published outputs are the return value, and (multiple_outputs) one XCom each
    assert x["return_value"] == {"accuracy": 0.93, "model": {"uri": "file:///m"}}
    assert x["accuracy"] == 0.93
    # the job identity is derived from the task instance
    assert _jobs("tether_t_logs", dr.run_id, "two_replicas") == [
        x["app_handle"].rsplit("/", 1)[-1]
    ]


def test_failed_job_fails_the_task_with_the_jobs_message(
    capfd: pytest.CaptureFixture[str],
) -> None:
    dr = run_dag("tether_t_fail", when=_when())
    text = "".join(capfd.readouterr())
    assert str(dr.state) == "failed"
    assert task_states(dr) == {"broken": "failed"}
    assert "JobFailedError" in text
    assert "finished FAILED: role 'sh' replica 0 exited with code 3" in text
    assert "the disk is full" in text  # the job's own stderr reaches the error message
    x = xcoms("tether_t_fail", dr.run_id, "broken")
    assert x["state"] == "FAILED"
    assert "return_value" not in x


def test_deferrable_task_defers_then_completes(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    dr = run_dag("tether_t_defer", when=_when())
    text = "".join(capfd.readouterr()) + caplog.text
    assert task_states(dr) == {"deferred": "success", "deferred_fail": "failed"}
    assert "deferring until tether job" in text
    assert "running trigger in line" in text  # the trigger really ran
    # after the trigger fired, execute_complete copied both replicas' logs
    assert "sh/0 deferred replica 0" in text
    assert "sh/1 deferred replica 1" in text
    x = xcoms("tether_t_defer", dr.run_id, "deferred")
    assert x["state"] == "SUCCEEDED"
    assert x["return_value"] == {"loss": 0.25}
    assert "out of memory" in text
    assert xcoms("tether_t_defer", dr.run_id, "deferred_fail")["state"] == "FAILED"
    # one job per task: deferring and resuming did not submit twice
    assert len(_jobs("tether_t_defer", dr.run_id, "deferred")) == 1
    # the task reads no XCom that is not there (Airflow logs each miss as an error)
    assert "XCom not found" not in text, [x for x in text.splitlines() if "XCom not found" in x]


def test_retry_after_a_failed_job_submits_a_new_one(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    dr = run_dag("tether_t_retry", conf={"marker": str(marker)}, when=_when())
    assert task_states(dr) == {"flaky": "success"}
    assert try_numbers(dr) == {"flaky": 2}
    jobs = _jobs("tether_t_retry", dr.run_id, "flaky")
    assert len(jobs) == 2  # the first FAILED, so the retry launched a second
    with get_runner() as runner:
        states = [runner.status(f"local_cwd://tether/{j}").state for j in jobs]  # type: ignore[union-attr]
    assert states == [AppState.FAILED, AppState.SUCCEEDED]


@pytest.mark.parametrize("dag_id", ["tether_t_recover", "tether_t_recover_defer"])
def test_failed_attempt_is_recovered_without_an_airflow_retry(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    dag_id: str,
) -> None:
    """A component with a recovery policy (``tests/adapters/recovering_app.py``): its first
    attempt fails, the follower submits attempt 1 under the same logical job, and the task
    succeeds on its first and only try. A deferrable task defers like any other: its
    trigger follows the logical job through the watch hub and recovers it."""
    caplog.set_level("INFO")
    ckpt = tmp_path / "ckpt"
    dr = run_dag(dag_id, conf={"ckpt": str(ckpt)}, when=_when())
    out = capfd.readouterr()
    text = out.out + out.err + caplog.text
    deferred = dag_id.endswith("_defer")
    assert ("deferring until tether job chain://" in text) == deferred
    assert ("running trigger in line" in text) == deferred  # the trigger really ran
    assert task_states(dr) == {"flaky": "success"}
    assert try_numbers(dr) == {"flaky": 1}
    assert (ckpt / "attempts").read_text() == "0\n1\n"
    assert xcoms(dag_id, dr.run_id, "flaky")["app_handle"].startswith("chain://")
    assert "[tether] attempt 1 on local_cwd" in text and "training, attempt 1" in text


def test_clear_after_success_runs_a_new_job(capfd: pytest.CaptureFixture[str]) -> None:
    first = run_dag("tether_t_logs", when=_when())
    handle = xcoms("tether_t_logs", first.run_id, "two_replicas")["app_handle"]
    capfd.readouterr()
    # a user clears the succeeded task: its next try runs the job again
    clear_tasks("tether_t_logs", first.run_id, ["two_replicas"])
    second = continue_run("tether_t_logs", first.run_id)
    text = "".join(capfd.readouterr())
    assert task_states(second) == {"two_replicas": "success"}
    assert try_numbers(second) == {"two_replicas": 2}
    x = xcoms("tether_t_logs", first.run_id, "two_replicas")
    assert x["app_handle"] != handle
    assert "try 1 recorded it: it runs anew" in text
    jobs = _jobs("tether_t_logs", first.run_id, "two_replicas")
    assert jobs == [handle.rsplit("/", 1)[-1], x["app_handle"].rsplit("/", 1)[-1]]
    # the new job carries the try that launched it
    with get_runner() as runner:
        app = runner.describe(x["app_handle"])
    assert app is not None and app.roles[0].env[ENV_TRY_NUMBER] == "2"


def test_clear_after_success_with_reattach_always_returns_the_earlier_result(
    capfd: pytest.CaptureFixture[str],
) -> None:
    first = run_dag("tether_t_always", when=_when())
    handle = xcoms("tether_t_always", first.run_id, "cached")["app_handle"]
    capfd.readouterr()
    clear_tasks("tether_t_always", first.run_id, ["cached"])
    second = continue_run("tether_t_always", first.run_id)
    text = "".join(capfd.readouterr())
    assert task_states(second) == {"cached": "success"}
    assert f"re-attached to tether job {handle} (SUCCEEDED) launched by try 1" in text
    x = xcoms("tether_t_always", first.run_id, "cached")
    assert x["app_handle"] == handle
    assert x["return_value"] == {"value": 7}
    assert len(_jobs("tether_t_always", first.run_id, "cached")) == 1


def test_factory_tasks_pass_outputs_downstream_and_map() -> None:
    dr = run_dag("tether_t_factory", when=_when())
    assert task_states(dr) == {"count_to": "success", "count_again": "success",
                               "fan_out[0]": "success", "fan_out[1]": "success"}
    assert xcoms("tether_t_factory", dr.run_id, "count_to")["total"] == 6
    # count_again got n=6 from count_to's output: 1+...+6
    assert xcoms("tether_t_factory", dr.run_id, "count_again")["return_value"] == {"n": 21}
    mapped = [xcoms("tether_t_factory", dr.run_id, "fan_out", i) for i in (0, 1)]
    assert [m["return_value"] for m in mapped] == [{"n": 3}, {"n": 10}]
    assert mapped[0]["app_handle"] != mapped[1]["app_handle"]


def test_secret_env_on_a_scheduler_without_secrets_fails_clearly(
    capfd: pytest.CaptureFixture[str],
) -> None:
    dr = run_dag("tether_t_secret_local", when=_when())
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"no_secret_store": "failed"}
    assert try_numbers(dr) == {"no_secret_store": 1}  # bad input: not retried
    assert "task 'no_secret_store': secret_env: the local_cwd scheduler cannot hold secrets" in text
    assert "tok-123" not in text
    assert _jobs("tether_t_secret_local", dr.run_id, "no_secret_store") == []
