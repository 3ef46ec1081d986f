"""The Airflow operator against a real Airflow 3.3: api-server, scheduler, dag-processor and
triggerer with the LocalExecutor on sqlite (``tests/e2e/infra/airflow.py``), one deployment
for the module. Airflow is driven as a user drives it: DAG runs triggered with ``airflow dags
trigger`` and the REST API, tasks cleared as the UI's Clear button does (the REST API:
``airflow tasks clear`` selects runs by logical date, which a manual run lacks), marked failed
with a REST ``PATCH``, the task's process killed with ``kill -9``. Jobs run on ``local_cwd``
(real processes); their state is read through tether's Runner, the task logs through the REST
API and the log files.

The DAGs are in ``tests/e2e/airflow_dags/tether_e2e_dags.py``: each job ticks once a second
until the test creates its gate file, so a test decides when a job ends. The plugin
``tests/e2e/airflow_plugins/tether_e2e_hold.py`` holds the scheduler, for the runs a test
asks, between deciding a run's success and writing it. A wait that times out says what Airflow
was doing (``AirflowStack.report``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.e2e.infra.airflow import AirflowError, AirflowStack
from tests.e2e.infra.slurm import SlurmCluster
from tether.adapters.airflow.building import task_job_key
from tether.runner import Runner, get_runner
from tether.specs import AppState

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        importlib.util.find_spec("airflow") is None, reason="apache-airflow is not installed"
    ),
]

DAGS = Path(__file__).parent / "airflow_dags" / "tether_e2e_dags.py"
HOLD_PLUGIN = Path(__file__).parent / "airflow_plugins" / "tether_e2e_hold.py"
PASSWORD = "s3cr3t-" + uuid.uuid4().hex[:12]
WAIT = 240.0  # seconds: a busy 2-core machine runs four Airflow components and the jobs
KILLS = 20  # the issue: 0 duplicates over 20 forced retries
T = TypeVar("T")


@dataclass
class Run:
    """A DAG run of the test, with the directory holding its tasks' gate files."""

    dag_id: str
    run_id: str
    gate: Path

    def open(self, task_id: str) -> None:
        """Lets the job of ``task_id`` finish."""
        (self.gate / task_id).touch()


class Deployment:
    """The module's Airflow plus helpers to drive it and to look at the jobs."""

    def __init__(self, stack: AirflowStack, runner: Runner, holds: Path) -> None:
        self.stack = stack
        self.runner = runner
        self.holds = holds

    # ---- Airflow ----------------------------------------------------------------------
    def trigger(self, dag_id: str, cli: bool = False, hold: bool = False) -> Run:
        """Triggers a DAG run (``airflow dags trigger`` with ``cli``, else the REST API);
        with ``hold`` the scheduler waits for :meth:`release` once it decides the run's
        success (``tests/e2e/airflow_plugins/tether_e2e_hold.py``)."""
        run_id = f"e2e-{uuid.uuid4().hex[:10]}"
        gate = self.stack.root / "gates" / run_id
        gate.mkdir(parents=True)
        if hold:
            (self.holds / f"{run_id}.hold").touch()
        conf = {"gate": str(gate)}
        if cli:
            out = self.stack.cli("dags", "trigger", dag_id, "--run-id", run_id,
                                 "--conf", json.dumps(conf))
            assert out.returncode == 0, f"airflow dags trigger failed:\n{out.stdout}{out.stderr}"
        else:
            self.stack.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                               {"dag_run_id": run_id, "logical_date": None, "conf": conf})
        return Run(dag_id, run_id, gate)

    def clear(self, run: Run, *task_ids: str) -> None:
        """Clears task instances of the run, as the UI's Clear does (the REST API)."""
        self.stack.request(
            "POST", f"/api/v2/dags/{run.dag_id}/clearTaskInstances",
            {"dry_run": False, "dag_run_id": run.run_id, "task_ids": list(task_ids),
             "only_failed": False},
        )

    def held(self, run: Run) -> bool:
        """Whether the scheduler holds in the run's success (it decided, has not written)."""
        return (self.holds / f"{run.run_id}.held").exists()

    def release(self, run: Run) -> None:
        """Lets the scheduler write the run's success, and holds it there no more."""
        (self.holds / f"{run.run_id}.hold").unlink()
        (self.holds / f"{run.run_id}.go").touch()

    def run_state(self, run: Run) -> str:
        return str(self.stack.get(f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}")["state"])

    def ti(self, run: Run, task_id: str) -> dict[str, Any]:
        return dict(self.stack.get(
            f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/{task_id}"
        ))

    def log(self, run: Run, task_id: str, try_number: int) -> str:
        """The task log of one try as the REST API serves it (trigger logs included)."""
        try:
            text = self.stack.request(
                "GET", f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/"
                f"{task_id}/logs/{try_number}?full_content=true", raw=True,
            )
        except AirflowError:  # the try has not started
            return ""
        return str(text)

    def log_files(self, run: Run, task_id: str) -> str:
        """Every log file of the task instance on disk (task and trigger logs, all tries)."""
        folder = (self.stack.home / "logs" / f"dag_id={run.dag_id}" / f"run_id={run.run_id}"
                  / f"task_id={task_id}")
        return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log*")))

    def xcom(self, run: Run, task_id: str, key: str) -> Any:
        try:
            entry = self.stack.get(
                f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/{task_id}/"
                f"xcomEntries/{key}?deserialize=true"
            )
        except AirflowError:
            return None
        return entry.get("value")

    def wait(self, what: str, check: Callable[[], T | None], run: Run | None = None,
             timeout: float = WAIT) -> T:
        """Polls ``check`` until it returns a value (bounded). A timeout says what Airflow was
        doing: ``run`` and its task instances, the components and their output."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        runs = None if run is None else [(run.dag_id, run.run_id)]
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n"
                             f"{self.stack.report(runs)}")

    def wait_state(self, run: Run, task_id: str, states: tuple[str, ...],
                   try_number: int | None = None, timeout: float = WAIT) -> dict[str, Any]:
        """Waits until the task instance is in one of ``states`` (at ``try_number``)."""
        def check() -> dict[str, Any] | None:
            ti = self.ti(run, task_id)
            ok = ti["state"] in states and (try_number is None or ti["try_number"] == try_number)
            return ti if ok else None

        return self.wait(
            f"{run.dag_id}/{run.run_id}/{task_id} in {states} (try {try_number})", check, run,
            timeout)

    def wait_run_state(self, run: Run, states: tuple[str, ...]) -> None:
        """Waits until the DAG run itself is in one of ``states``."""
        self.wait(f"DAG run {run.dag_id}/{run.run_id} in {states}",
                  lambda: self.run_state(run) in states, run)

    def wait_deferred(self, run: Run, task_id: str, try_number: int) -> None:
        """Waits until the try is deferred and the scheduler has seen its worker exit.

        Airflow 3.3 fails a resumed try ("state changed externally") when the exit event of
        the worker that deferred reaches the scheduler after the trigger fired, which a job
        ending seconds after the deferral provokes on a busy machine. A test lets a deferred
        job end only after this.
        """
        self.wait_state(run, task_id, ("deferred",), try_number=try_number)
        seen = re.compile(
            rf"TaskInstance Finished: dag_id={run.dag_id}, task_id={task_id}, "
            rf"run_id={run.run_id}, .*?state=deferred, .*?try_number={try_number}\b"
        )
        self.wait(
            f"the scheduler to see try {try_number} of {task_id} defer",
            lambda: seen.search(
                self.stack.log_path("scheduler").read_text(errors="replace")) is not None,
            run,
        )

    def wait_trigger_running(self, run: Run, task_id: str, try_number: int) -> None:
        """Waits until the deferred try's trigger runs: it streams the job's lines into the
        task log. Until the triggerer loads a trigger (on a loaded machine it once took
        minutes) there is no trigger whose ``on_kill`` a clear or mark-failed could call."""
        self.wait(f"the trigger of try {try_number} of {task_id} to stream the job's lines",
                  lambda: "sh/0 tick" in self.log(run, task_id, try_number), run)

    def wait_running_job(self, run: Run, task_id: str, running: bool = True) -> str:
        """Waits until the task's job runs (``running``) or was submitted; returns its handle
        (the XCom ``app_handle``)."""
        def check() -> str | None:
            handle = self.xcom(run, task_id, "app_handle")
            if not handle or not running:
                return str(handle) if handle else None
            status = self.runner.status(str(handle))
            return str(handle) if status and status.state == AppState.RUNNING else None

        return self.wait(f"the job of {run.run_id}/{task_id} to run", check, run)

    # ---- jobs -------------------------------------------------------------------------
    def jobs_of(self, run: Run, task_id: str, tries: int = KILLS + 2) -> list[str]:
        """The jobs launched by any try of the task instance (found by their job keys)."""
        keys = {task_job_key(run.dag_id, run.run_id, task_id, -1, t)
                for t in range(1, tries + 1)}
        return [a.app_handle for a in self.runner.list("local_cwd") if a.job_key in keys]

    def state(self, handle: str) -> AppState | None:
        status = self.runner.status(handle)
        return status.state if status else None

    def wait_job_state(self, run: Run, handle: str, state: AppState) -> None:
        """Waits until the job ``handle`` (of a task of ``run``) is in ``state``."""
        self.wait(f"job {handle} {state.name}", lambda: self.state(handle) == state, run)


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The module's Airflow deployment; tether state (jobs) in the same temp dir."""
    root = tmp_path_factory.mktemp("airflow-e2e")
    (root / "empty.tetherconfig").write_text("")
    state = root / "tether-state"
    holds = root / "holds"
    holds.mkdir()
    env = {
        "TETHER_E2E_HOLD_DIR": str(holds),
        "TETHER_STATE_DIR": str(state),
        "TETHERCONFIG": str(root / "empty.tetherconfig"),
        "AIRFLOW_CONN_TETHER_E2E_DB": json.dumps(
            {"conn_type": "generic", "host": "db.example", "password": PASSWORD}
        ),
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        for var in ("TETHER_TRACKERS", "TETHER_PARENT_RUN_ID", "TETHER_OUTPUTS_ROOT"):
            mp.delenv(var, raising=False)
        # state_dir given: tests/conftest.py points $TETHER_STATE_DIR elsewhere per test
        with AirflowStack(root, [DAGS], env=env, plugins=[HOLD_PLUGIN]) as stack, get_runner(
            state_dir=str(state)
        ) as runner:
            try:
                yield Deployment(stack, runner, holds)
            finally:
                for app in runner.list("local_cwd"):  # no job outlives the module
                    if not app.state.is_terminal():
                        runner.cancel(app.app_handle)


def test_clear_after_success_runs_a_new_job(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_quick", cli=True)
    airflow.wait_state(run, "quick", ("success",), try_number=1)
    first = airflow.xcom(run, "quick", "app_handle")
    assert str(airflow.xcom(run, "quick", "try")) == "1"

    # Clear once the DAG run has finished, as a user clears a finished run: a clear that lands
    # after the scheduler read the task's success and before it wrote the run's success is
    # lost (Airflow 3.3; the next test shows it).
    airflow.wait_run_state(run, ("success",))
    airflow.clear(run, "quick")
    airflow.wait_state(run, "quick", ("success",), try_number=2)

    second = airflow.xcom(run, "quick", "app_handle")
    assert second and second != first
    assert str(airflow.xcom(run, "quick", "try")) == "2"  # the output of the new job
    assert sorted(airflow.jobs_of(run, "quick")) == sorted([first, second])
    assert airflow.state(first) == airflow.state(second) == AppState.SUCCEEDED
    assert "recorded it: it runs anew" in airflow.log(run, "quick", 2)


def test_a_clear_as_the_run_finishes_is_lost_and_clearing_again_runs_it(
    airflow: Deployment,
) -> None:
    """Airflow 3.3's behaviour, not tether's (docs/airflow.md): the scheduler decides a run's
    success from the task instances it read, then writes it. A clear in that window resets
    the task but leaves the run alone (it is still running), and the scheduler's write then
    makes the run a success whose cleared task has no state and is never scheduled. The hold
    plugin keeps the window open; on a loaded machine it is open for a moment after each
    task ends. Clearing again, the run now finished, runs try 2 and a new job. A timed-out
    wait for try 2 says so. If this fails after an Airflow upgrade, Airflow closed the
    window: update docs/airflow.md and test_clear_after_success_runs_a_new_job."""
    run = airflow.trigger("tether_e2e_quick", hold=True)
    airflow.wait("the scheduler to decide the run's success", lambda: airflow.held(run), run)
    assert airflow.ti(run, "quick")["state"] == "success"
    assert airflow.run_state(run) == "running"  # decided, not written
    first = airflow.xcom(run, "quick", "app_handle")
    airflow.clear(run, "quick")
    assert (airflow.ti(run, "quick")["state"], airflow.run_state(run)) == (None, "running")
    airflow.release(run)
    airflow.wait_run_state(run, ("success",))
    lost = airflow.ti(run, "quick")
    assert (lost["state"], lost["try_number"]) == (None, 1)  # the clear is lost

    # what a wait for try 2 reports: the run, its task, the components, their output
    with pytest.raises(AssertionError) as failed:
        airflow.wait_state(run, "quick", ("success",), try_number=2, timeout=0.1)
    report = str(failed.value)
    assert f"DAG run tether_e2e_quick/{run.run_id}: state=success clear_number=1" in report
    assert (f"task quick[-1]: state=None try_number=1 max_tries=1 hostname={lost['hostname']} "
            f"pid={lost['pid']}") in report
    assert "scheduler running (pid " in report and "triggerer running (pid " in report
    assert re.search(r"scheduler \w+ \(last 20\d\d-", report), report[:3000]  # its heartbeat
    assert f"DagRun Finished: dag_id=tether_e2e_quick, logical_date=None, run_id={run.run_id}" \
        in report.split("--- api-server ---")[0]  # the scheduler's lines about the run
    assert "--- scheduler ---" in report and "--- dag-processor ---" in report

    airflow.clear(run, "quick")  # the run is finished now: Airflow queues it again
    airflow.wait_state(run, "quick", ("success",), try_number=2)
    second = airflow.xcom(run, "quick", "app_handle")
    assert second and second != first
    assert sorted(airflow.jobs_of(run, "quick")) == sorted([first, second])


def test_clear_while_running_reattaches_in_both_modes(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_gate")
    handles = {task: airflow.wait_running_job(run, task) for task in ("sync", "deferred")}
    airflow.wait_state(run, "deferred", ("deferred",), try_number=1)
    airflow.wait_trigger_running(run, "deferred", 1)

    airflow.clear(run, "sync", "deferred")
    for task, handle in handles.items():
        def reattached(t: str = task, h: str = handle) -> bool:
            return f"re-attached to tether job {h}" in airflow.log(run, t, 2)

        airflow.wait(f"try 2 of {task} to re-attach", reattached, run)
        assert airflow.state(handle) == AppState.RUNNING
        if task == "deferred":
            airflow.wait_deferred(run, task, 2)
        run.open(task)
    for task, handle in handles.items():
        airflow.wait_state(run, task, ("success",), try_number=2)
        assert airflow.jobs_of(run, task) == [handle]  # no second job
        assert str(airflow.xcom(run, task, "try")) == "1"  # the result of try 1's job
        assert "leaving tether job" in airflow.log(run, task, 1)


def test_worker_kill9_after_submit_reattaches_without_duplicates(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_kill")
    handle = ""
    for try_number in range(1, KILLS + 1):
        ti = airflow.wait_state(run, "victim", ("running",), try_number=try_number)
        # the try submitted (try 1) or re-attached (later tries) and follows the job's log
        def following(n: int = try_number) -> str | None:
            t = airflow.log(run, "victim", n)
            started = "submitted tether job" in t or "re-attached to tether job" in t
            return t if started and "sh/0 tick" in t else None

        text = airflow.wait(f"try {try_number} to follow the job", following, run)
        if try_number == 1:
            handle = str(airflow.xcom(run, "victim", "app_handle"))
        else:
            assert f"re-attached to tether job {handle}" in text
        os.kill(int(ti["pid"]), signal.SIGKILL)  # the process running the task
    airflow.wait_state(run, "victim", ("running",), try_number=KILLS + 1)
    run.open("victim")
    airflow.wait_state(run, "victim", ("success",), try_number=KILLS + 1)

    assert airflow.jobs_of(run, "victim") == [handle]  # 0 duplicates over KILLS kills
    assert airflow.state(handle) == AppState.SUCCEEDED
    assert str(airflow.xcom(run, "victim", "try")) == "1"
    submitted = [n for n in range(1, KILLS + 2)
                 if "submitted tether job" in airflow.log(run, "victim", n)]
    assert submitted == [1]


def test_execution_timeout_cancels_the_job_in_both_modes(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_timeout")
    handles = {task: airflow.wait_running_job(run, task, running=False)
               for task in ("sync", "deferred")}
    for task, handle in handles.items():
        airflow.wait_state(run, task, ("failed",), try_number=1)
        airflow.wait_job_state(run, handle, AppState.CANCELLED)
        assert f"execution_timeout reached: cancelling tether job {handle}" in airflow.log(
            run, task, 1)
        assert "sh/0 finished" not in airflow.log_files(run, task)


def test_mark_failed_cancels_the_job_in_both_modes(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_gate")
    handles = {task: airflow.wait_running_job(run, task) for task in ("sync", "deferred")}
    airflow.wait_state(run, "deferred", ("deferred",), try_number=1)
    airflow.wait_state(run, "sync", ("running",), try_number=1)
    airflow.wait_trigger_running(run, "deferred", 1)
    for task in handles:
        airflow.stack.request(
            "PATCH", f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/{task}",
            {"new_state": "failed"},
        )
    for task, handle in handles.items():
        airflow.wait_job_state(run, handle, AppState.CANCELLED)
        assert airflow.ti(run, task)["state"] == "failed"
        assert f"cancelling tether job {handle} (the task instance is failed)" in (
            airflow.log(run, task, 1))


def test_kill_while_no_triggerer_runs_the_trigger(airflow: Deployment) -> None:
    """A deferred task marked failed, and another cleared, while the triggerer is down: no
    trigger ran, so no ``on_kill``. The cleared one's next try re-attaches to its job; once
    the triggerer is back, the failed one's trigger checks its task instance as it starts
    and cancels its job."""
    airflow.stack.stop_component("triggerer")
    try:
        assert "triggerer stopped" in airflow.stack.report(runs=())  # a failed wait says so
        failed, cleared = airflow.trigger("tether_e2e_gate"), airflow.trigger("tether_e2e_gate")
        handles = {}
        for run in (failed, cleared):
            run.open("sync")
            handles[run.run_id] = airflow.wait_running_job(run, "deferred")
            airflow.wait_deferred(run, "deferred", 1)
        airflow.stack.request(
            "PATCH", f"/api/v2/dags/{failed.dag_id}/dagRuns/{failed.run_id}/taskInstances/"
            "deferred", {"new_state": "failed"},
        )
        airflow.clear(cleared, "deferred")
        kept = handles[cleared.run_id]
        airflow.wait("try 2 to re-attach with no trigger ever run",
                     lambda: f"re-attached to tether job {kept}" in airflow.log(
                         cleared, "deferred", 2), cleared)
        airflow.wait_deferred(cleared, "deferred", 2)
        assert airflow.state(handles[failed.run_id]) == AppState.RUNNING  # nothing ran yet
    finally:
        airflow.stack.start_component("triggerer")
    handle = handles[failed.run_id]
    airflow.wait_job_state(failed, handle, AppState.CANCELLED)
    # the trigger's own check as it started (Airflow 3.3 also calls on_kill when it drops
    # the trigger a moment later; the check covers a trigger that starts after that cancel)
    airflow.wait("the trigger's start check", lambda: (
        f"killed before its trigger ran: cancelling tether job {handle} (the task instance "
        "is failed)") in airflow.log_files(failed, "deferred"), failed)
    assert airflow.ti(failed, "deferred")["state"] == "failed"
    cleared.open("deferred")
    airflow.wait_state(cleared, "deferred", ("success",), try_number=2)
    assert airflow.jobs_of(cleared, "deferred") == [kept]  # no second job
    assert airflow.state(kept) == AppState.SUCCEEDED


def test_deferred_logs_are_live_and_secrets_never_logged(airflow: Deployment) -> None:
    run = airflow.trigger("tether_e2e_gate")
    handle = airflow.wait_running_job(run, "deferred")
    airflow.wait_deferred(run, "deferred", 1)
    # the trigger streams the job's lines into the task log while the job runs
    airflow.wait("live job lines in the deferred task's log",
                 lambda: "sh/0 tick 2" in airflow.log(run, "deferred", 1), run)
    assert airflow.state(handle) == AppState.RUNNING  # its gate is closed: it cannot end
    assert "sh/0 tick" in airflow.log_files(run, "deferred")  # the trigger's log file

    for task in ("sync", "deferred"):
        run.open(task)
    for task in ("sync", "deferred"):
        airflow.wait_state(run, task, ("success",), try_number=1)
        api, files = airflow.log(run, task, 1), airflow.log_files(run, task)
        for text in (api, files):
            assert "sh/0 finished" in text
            assert re.search(r"password is \*{3,}", text), text[-2000:]
            assert PASSWORD not in text
        assert PASSWORD not in json.dumps(airflow.ti(run, task))  # rendered fields (UI)
        # each line once: the trigger's cursor and execute_complete do not repeat lines
        assert len(re.findall(r"sh/0 tick 1\b", api)) == 1
        # a task that succeeded reads no XCom that is not there (each miss is an error line)
        assert "XCom not found" not in files, [x for x in files.splitlines() if "XCom" in x]
    everything = "\n".join(p.read_text(errors="replace")
                           for p in (airflow.stack.home / "logs").rglob("*.log*"))
    assert PASSWORD not in everything


def test_progress_reports_show_in_the_task_log_while_the_job_runs(airflow: Deployment) -> None:
    """``tether.runtime.report`` from the job: the running task (the worker) and the deferred
    one (the triggerer) write each report into the task log and the XCom ``tether_progress``
    while the job waits for its gate; the last report stays in the XCom."""
    run = airflow.trigger("tether_e2e_progress")
    for task in ("sync", "deferred"):
        handle = airflow.wait_running_job(run, task)
        airflow.wait(f"the first report in the log of {task}",
                     lambda t=task: "tether progress: 1/4 (25%) loss=0.5" in airflow.log(
                         run, t, 1), run)
        # the XCom holds the report while the job runs (the worker's, the triggerer's push)
        live = airflow.wait(f"the first report as the XCom of {task}",
                            lambda t=task: airflow.xcom(run, t, "tether_progress"), run)
        assert (live["step"], live["total"], live["metrics"]) == (1, 4, {"loss": 0.5}), live
        assert live["text"] == "1/4 (25%) loss=0.5", live
        assert airflow.state(handle) == AppState.RUNNING  # its gate is closed: it cannot end
        if task == "deferred":
            assert "tether progress: 1/4" in airflow.log_files(run, task)  # the trigger's log
            airflow.wait_deferred(run, task, 1)
        run.open(task)
    for task in ("sync", "deferred"):
        airflow.wait_state(run, task, ("success",), try_number=1)
        assert "tether progress: 4/4 (100%) loss=0.125" in airflow.log(run, task, 1)
        last = airflow.xcom(run, task, "tether_progress")
        assert last["step"] == 4 and last["metrics"] == {"loss": 0.125}, last


def test_slurm_connection_picks_the_cluster_and_partition(
    airflow: Deployment, slurm_cluster: SlurmCluster
) -> None:
    # a user adds the connection (the REST API, as the UI's Connections page does)
    airflow.stack.request("POST", "/api/v2/connections", {
        "connection_id": "tether_e2e_slurm", "conn_type": "tether_slurm",
        "extra": json.dumps({"slurm_conf": str(slurm_cluster.conf),
                             "partition": slurm_cluster.partition}),
    })
    run = airflow.trigger("tether_e2e_slurm")
    ti = airflow.wait_state(run, "on_slurm", ("success", "failed"))
    text = airflow.log(run, "on_slurm", 1)
    assert ti["state"] == "success", text[-3000:]
    assert str(airflow.xcom(run, "on_slurm", "app_handle")).startswith("slurm://")
    # the connection's partition reached sbatch (the job did not name one)
    assert re.search(rf"sh/0 slurm job \d+ on {slurm_cluster.partition}\b", text), text[-3000:]
    assert f"--partition={slurm_cluster.partition}" in text or any(
        f"--partition={slurm_cluster.partition}" in p.read_text(errors="replace")
        for p in (airflow.stack.root / "tether-state").rglob("*") if p.is_file()
    )
