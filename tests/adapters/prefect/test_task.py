"""Real Prefect 3 flows running tether components on ``local_cwd``.

Each test runs flows against the session's Prefect server (see conftest) and checks what a
user sees: the task's result, its failure message, the flow run's logs and artifacts as the
Prefect API returns them, and the jobs (and processes) that exist afterwards.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.prefect.conftest import wait_for_logs, wait_until
from tests.schedulers.watch.counting import CountingHub
from tether.adapters.common import JobFailedError, JobResult
from tether.adapters.prefect.identity import task_job_key
from tether.adapters.prefect.task import SPEC_ATTR
from tether.runner import get_runner
from tether.specs import AppDef, AppState, Role

pytestmark = pytest.mark.usefixtures("prefect_test")

OUTPUTS_CODE = """
import os
from tether.tracker import AppRun
rid = os.environ["TETHER_REPLICA_ID"]
print(f"hello from replica {rid}", flush=True)
if rid == "0":
    run = AppRun.run_from_env()
    run.add_output("answer", 42)
    run.add_output("parent", os.environ["TETHER_PARENT_RUN_ID"])
    run.add_output("key", os.environ["TETHER_JOB_KEY"])
"""


def _artifacts(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return list(
            client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )
        )


def _task_runs(flow_run_id: Any, final: int = 1) -> list[Any]:
    """The flow run's task runs, once ``final`` of them are recorded in a final state.

    Prefect 3 records task runs from events, a moment after the flow run returns.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    def read() -> list[Any] | None:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
        done = [r for r in runs if r.state is not None and r.state.is_final()]
        return list(runs) if len(done) >= final else None

    runs: list[Any] = wait_until(read, 20, f"{final} final task run(s) of flow run {flow_run_id}")
    return runs


def _local_apps() -> list[Any]:
    with get_runner() as runner:
        return runner.list("local_cwd")


def test_success_returns_outputs_and_streams_every_replica_into_the_run_logs() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd")

    @flow
    def two_replicas() -> JobResult:
        return py(c=OUTPUTS_CODE, num_replicas=2)

    state = two_replicas(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert isinstance(result, JobResult)
    assert result.state == AppState.SUCCEEDED
    assert result.outputs["answer"] == 42
    assert result.app_handle.startswith("local_cwd://")
    assert not result.reattached

    flow_run_id = state.state_details.flow_run_id
    (task_run,) = _task_runs(flow_run_id)
    # identity: parent run = the flow run; key from flow run + task key + call + parameters
    assert result.outputs["parent"] == str(flow_run_id)
    assert result.outputs["key"] == task_job_key(
        flow_run_id, task_run.task_key, 0, {"c": OUTPUTS_CODE, "num_replicas": 2},
        spec_digest=getattr(py.fn, SPEC_ATTR).digest(),
    )

    msgs = wait_for_logs(
        flow_run_id, "python/0 hello from replica 0", "python/1 hello from replica 1",
        f"submitted tether job {result.app_handle}",
        f"tether job {result.app_handle} finished SUCCEEDED",
    )
    assert sum("hello from replica" in m for m in msgs) == 2


def test_job_summary_artifact_and_no_link_without_a_ui() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd", name="summarized")

    @flow
    def one_job() -> JobResult:
        return py(c=OUTPUTS_CODE)

    state = one_job(return_state=True)
    result = state.result()
    arts = _artifacts(state.state_details.flow_run_id)
    (summary,) = [a for a in arts if a.type == "markdown"]
    assert summary.key == "tether-summarized"
    assert summary.task_run_id is not None
    for needle in (result.app_handle, "local_cwd", "**SUCCEEDED**", "| python | 1 |",
                   "| python/0 | SUCCEEDED | 0 |", "| answer | `42` |"):
        assert needle in summary.data, (needle, summary.data)
    # local_cwd has no UI: no link artifact
    assert [a.key for a in arts] == ["tether-summarized"]


def test_link_artifact_points_at_the_job_ui() -> None:
    from prefect import flow, task

    from tether.adapters.prefect.artifacts import create_link

    @task
    def publish() -> None:
        create_link("train", JobResult("k8s://ns/app-1", AppState.RUNNING,
                                       ui_url="https://ui.example/jobs/app-1"))

    @flow
    def links() -> None:
        publish()

    state = links(return_state=True)
    (link,) = _artifacts(state.state_details.flow_run_id)
    assert link.key == "tether-train-ui"
    assert link.data == "[k8s://ns/app-1](https://ui.example/jobs/app-1)"  # Prefect's link form


def test_a_link_is_looked_for_only_where_the_scheduler_may_give_one() -> None:
    import sys

    from tether.adapters.common import JobSession
    from tether.adapters.prefect.run import _publish_link

    app = AppDef("noui", [Role("r", image="", entrypoint=sys.executable, args=["-c", "pass"])])
    reads: list[str] = []
    with JobSession(app, "local_cwd") as session:
        session.submit()
        status = session.follower.status

        def counting(app_handle: str) -> Any:
            reads.append(app_handle)
            return status(app_handle)

        session.follower.status = counting  # type: ignore[method-assign]
        _publish_link("noui", session, logging.getLogger("test"))
        assert reads == []  # local_cwd declares ui_urls=False: no status read for a link
        # a handle whose scheduler declares nothing here (a logical job's) is looked at
        session.adopt("chain://tether/chain-none")
        _publish_link("noui", session, logging.getLogger("test"))
        assert reads == ["chain://tether/chain-none"]


def test_failure_raises_with_the_jobs_own_message() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    sh = component_task("utils.sh", scheduler="local_cwd")

    @flow
    def failing() -> JobResult:
        return sh("echo 'disk full: cannot write /ckpt' >&2; exit 3")

    state = failing(return_state=True)
    assert state.is_failed()
    with pytest.raises(JobFailedError) as info:
        state.result()
    text = str(info.value)
    assert "FAILED" in text and "exited with code 3" in text and "disk full" in text
    # the persisted failure, read back through the API, is the same error
    from prefect.client.orchestration import get_client

    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(flow_run_id).state
    assert stored is not None
    with pytest.raises(JobFailedError) as again:
        stored.result()
    assert again.value.result.app_handle == info.value.result.app_handle
    (task_run,) = _task_runs(state.state_details.flow_run_id)
    assert task_run.state.is_failed()
    assert "disk full: cannot write /ckpt" in task_run.state.message
    # the failed job's summary is published too
    arts = _artifacts(state.state_details.flow_run_id)
    (summary,) = [a for a in arts if a.key == "tether-utils-sh"]
    assert "**FAILED**" in summary.data


def test_map_and_submit_run_parallel_jobs() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd")
    code = (
        "import time\nfrom tether.tracker import AppRun\nrun = AppRun.run_from_env()\n"
        "run.add_output('start', time.time())\ntime.sleep(2.5)\n"
        "run.add_output('end', time.time())\nrun.add_output('arg', 'ARG')\n"
    )

    @flow
    def fan_out() -> list[JobResult]:
        mapped = py.map(c=[code.replace("ARG", x) for x in ("a", "b")])
        extra = py.submit(c=code.replace("ARG", "c"))
        return [f.result() for f in [*mapped, extra]]

    state = fan_out(return_state=True)
    assert state.is_completed(), state.message
    results = state.result()
    assert sorted(r.outputs["arg"] for r in results) == ["a", "b", "c"]
    assert len({r.app_handle for r in results}) == 3
    # the three jobs overlapped in time
    assert max(r.outputs["start"] for r in results) < min(r.outputs["end"] for r in results)
    assert len({a.job_key for a in _local_apps()}) == 3


def test_component_tasks_of_one_flow_share_one_view_of_the_watch_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    counting = CountingHub().install(monkeypatch)
    py = component_task("utils.python", scheduler="local_cwd", poll_interval=0.2)
    go = tmp_path / "go"
    code = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\n"

    @flow
    def two() -> tuple[dict[str, int], list[JobResult]]:
        futures = [py.submit(c=code + f"print({i})") for i in range(2)]
        for _ in range(600):  # until both tasks follow their jobs (or they never will)
            if counting.most_read() == 2:
                break
            time.sleep(0.05)
        following = counting.hub.stats()
        go.touch()
        return following, [f.result() for f in futures]

    try:
        following, results = two()
    finally:
        go.touch()
        counting.hub.close()
    assert [r.state for r in results] == [AppState.SUCCEEDED] * 2
    # two tasks, one shared view: one reader, whose reads cover both jobs
    assert following["views"] == 1 and following["jobs"] == 2
    assert counting.readers == 1
    assert counting.most_read() == 2


class _FailOnce(logging.Filter):
    """Makes the task run logger raise once, on the first line of the job: a crash after submit."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle
        self.fired = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.fired and self.needle in record.getMessage():
            self.fired = True
            raise RuntimeError("injected failure of the log sink")
        return True


def test_retry_reattaches_to_the_running_job_without_a_duplicate() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd", retries=1,
                        retry_delay_seconds=0)
    code = "import time\nprint('first line', flush=True)\ntime.sleep(2)\nprint('last line')\n"
    fail_once = _FailOnce("python/0 first line")
    logger = logging.getLogger("prefect.task_runs")
    logger.addFilter(fail_once)
    try:

        @flow
        def retried() -> JobResult:
            return py(c=code)

        state = retried(return_state=True)
    finally:
        logger.removeFilter(fail_once)
    assert fail_once.fired
    assert state.is_completed(), state.message
    result = state.result()
    assert result.state == AppState.SUCCEEDED
    assert result.reattached

    (task_run,) = _task_runs(state.state_details.flow_run_id)
    assert task_run.run_count == 2
    apps = _local_apps()
    assert len(apps) == 1, apps  # one job: the retry re-attached instead of submitting
    assert apps[0].job_key == task_job_key(
        state.state_details.flow_run_id, task_run.task_key, 0, {"c": code},
        spec_digest=getattr(py.fn, SPEC_ATTR).digest(),
    )
    assert result.app_handle.endswith(apps[0].app_id)
    wait_for_logs(
        state.state_details.flow_run_id, "injected failure of the log sink",
        f"re-attached to tether job {result.app_handle}", "python/0 last line",
    )


def test_retry_resubmits_after_a_failed_attempt(tmp_path: Path) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    marker = tmp_path / "attempted"
    sh = component_task("utils.sh", scheduler="local_cwd", retries=1, retry_delay_seconds=0)
    script = f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 1; fi"

    @flow
    def flaky() -> JobResult:
        return sh(script)

    state = flaky(return_state=True)
    assert state.is_completed(), state.message
    assert not state.result().reattached
    states = sorted(a.state.name for a in _local_apps())
    assert states == ["FAILED", "SUCCEEDED"]


def test_failed_attempt_is_recovered_without_a_prefect_retry(tmp_path: Path) -> None:
    """A component with a recovery policy (see ``tests/adapters/recovering_app.py``): its
    first attempt fails, the task (the follower) submits attempt 1 under the same logical
    job, and the task run succeeds on its one and only run."""
    from prefect import flow

    from tether.adapters.prefect import component_task

    ckpt = tmp_path / "ckpt"
    flaky = component_task("tests.adapters.recovering_app:flaky", scheduler="local_cwd")

    @flow
    def recovers() -> JobResult:
        return flaky(ckpt=str(ckpt))

    state = recovers(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.state == AppState.SUCCEEDED and result.app_handle.startswith("chain://")
    assert (ckpt / "attempts").read_text() == "0\n1\n"
    assert sorted(a.state.name for a in _local_apps()) == ["FAILED", "SUCCEEDED"]
    flow_run_id = state.state_details.flow_run_id
    (task_run,) = _task_runs(flow_run_id)
    assert task_run.run_count == 1
    wait_for_logs(flow_run_id, "train/0 [tether] attempt 0 on local_cwd",
                  "train/0 training, attempt 0", "train/0 training, attempt 1")


def _sleeper_code(pidfile: Path, marker: str) -> str:
    return (
        "import os, sys, time\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        f"print('sleeping', {marker!r}, flush=True)\n"
        "time.sleep(120)\n"
    )


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _assert_job_cancelled_and_gone(pidfile: Path, marker: str) -> None:
    from tests.adapters.prefect.conftest import pid_alive

    pid = int(pidfile.read_text())
    wait_until(lambda: not pid_alive(pid), 10, f"job process {pid} to exit")
    assert _processes_with(marker) == []
    apps = _local_apps()
    assert [a.state for a in apps] == [AppState.CANCELLED], apps


@pytest.mark.parametrize("how", ["direct", "submit"])
def test_task_timeout_cancels_the_job(tmp_path: Path, how: str) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    marker = f"tether-timeout-{uuid.uuid4().hex}"
    pidfile = tmp_path / "pid"
    py = component_task("utils.python", scheduler="local_cwd", timeout_seconds=2)

    @flow
    def slow() -> JobResult:
        code = _sleeper_code(pidfile, marker)
        if how == "submit":
            return py.submit(marker, c=code).result()
        return py(marker, c=code)

    state = slow(return_state=True)
    assert state.is_failed()
    (task_run,) = _task_runs(state.state_details.flow_run_id)
    assert task_run.state.name == "TimedOut", task_run.state
    assert task_run.state.is_failed() and "exceeded timeout" in task_run.state.message
    _assert_job_cancelled_and_gone(pidfile, marker)
    wait_for_logs(state.state_details.flow_run_id, "cancelling tether job", "is CANCELLED")


def test_cancelling_the_flow_run_through_the_api_cancels_the_job(tmp_path: Path) -> None:
    import threading

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    from tether.adapters.prefect import component_task

    marker = f"tether-cancel-{uuid.uuid4().hex}"
    pidfile = tmp_path / "pid"
    py = component_task("utils.python", scheduler="local_cwd")
    ids: list[Any] = []
    states: list[Any] = []

    @flow
    def long_flow() -> JobResult:
        from prefect.runtime import flow_run

        ids.append(flow_run.id)
        return py(marker, c=_sleeper_code(pidfile, marker))

    thread = threading.Thread(target=lambda: states.append(long_flow(return_state=True)))
    thread.start()
    try:
        wait_until(pidfile.exists, 30, "the job to start")
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(ids[0], Cancelling(), force=True)
        thread.join(30)
        assert not thread.is_alive()
    finally:
        if thread.is_alive():  # do not leave the job behind when the test fails
            with get_runner() as runner:
                for app in runner.list("local_cwd"):
                    runner.cancel(app.app_handle)
            thread.join(30)
    _assert_job_cancelled_and_gone(pidfile, marker)
    (task_run,) = _task_runs(ids[0])
    assert task_run.state.is_cancelled(), task_run.state
    assert "was cancelled because the flow run" in task_run.state.message
    assert "is CANCELLING" in task_run.state.message
    # a flow run that no runner supervises stays CANCELLING: Prefect has nothing to kill
    assert states[0].is_cancelling() or states[0].is_final()


def test_signature_options_and_errors() -> None:
    from prefect.cache_policies import NO_CACHE

    from tether.adapters.prefect import component_task
    from tether.components.utils import python

    py = component_task("utils.python", scheduler="local_cwd", retries=2, tags=["ml"],
                        timeout_seconds=30)
    sig = inspect.signature(py.fn)
    expected = inspect.signature(python, eval_str=True)
    assert list(sig.parameters) == list(expected.parameters)
    for name, param in expected.parameters.items():
        got = sig.parameters[name]
        assert (got.kind, got.default, got.annotation) == (
            param.kind, param.default, param.annotation
        )
    assert sig.parameters["c"].annotation == (str | None)
    assert sig.return_annotation is JobResult
    assert py.name == "utils.python"
    assert py.retries == 2 and py.timeout_seconds == 30 and py.tags == {"ml"}
    assert py.cache_policy is NO_CACHE
    assert "Runs Python" in (py.description or "")

    with pytest.raises(TypeError, match=r"'retires'.*Did you mean retries"):
        component_task("utils.python", retires=2)
    with pytest.raises(ValueError, match=r"unknown component 'utils\.pyhton'.*utils\.python"):
        component_task("utils.pyhton")
    with pytest.raises(ValueError, match="not_a_component is not a valid component"):
        component_task(not_a_component)
    with pytest.raises(ValueError, match="poll_interval must be positive"):
        component_task("utils.python", poll_interval=0)


def test_wrong_arguments_fail_the_task_with_the_components_message() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd")

    @flow
    def wrong() -> JobResult:
        return py(num_replicas="many")

    state = wrong(return_state=True)
    assert state.is_failed()
    with pytest.raises(ValueError, match=r"num_replicas.*expects int.*'many'"):
        state.result()
    assert _local_apps() == []


def greet(who: str, times: int = 1) -> AppDef:
    """Greets someone (a component defined next to the flow).

    Args:
        who: Whom to greet.
        times: How often.
    """
    return AppDef(name="greet", roles=[
        Role(name="greet", image="none", entrypoint="sh",
             args=["-c", f"for i in $(seq {times}); do echo hi {who}; done"]),
    ])


def not_a_component(data: object) -> AppDef:
    """Takes a parameter type no command line can express.

    Args:
        data: Anything.
    """
    raise AssertionError("never called")


def test_inline_component_function() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    greet_task = component_task(greet, scheduler="local_cwd")
    assert list(inspect.signature(greet_task.fn).parameters) == ["who", "times"]
    assert greet_task.name == "greet"

    @flow
    def greeting() -> JobResult:
        return greet_task("ada", times=2)

    state = greeting(return_state=True)
    assert state.result().state == AppState.SUCCEEDED
    msgs = wait_for_logs(state.state_details.flow_run_id, "greet/0 hi ada")
    assert sum("greet/0 hi ada" in m for m in msgs) == 2


def test_dryrun_shows_the_prefect_layer_the_appdef_and_the_request() -> None:
    from tether.adapters.prefect import component_task, dryrun

    py = component_task("utils.python", scheduler="local_cwd", retries=3,
                        env={"API_TOKEN": "s3cr3t"})
    out = dryrun(py.with_options(timeout_seconds=60), c="print(1)", num_replicas=2)
    assert out.task["retries"] == 3 and out.task["timeout_seconds"] == 60
    assert out.task["parameters"] == {"c": "print(1)", "num_replicas": 2}
    assert out.task["scheduler"] == "local_cwd"
    assert out.task["cache_policy"] == "NO_CACHE"
    assert out.app["roles"][0]["num_replicas"] == 2
    text = str(out)
    for needle in ("# Prefect task", "# tether AppDef", "# local_cwd request", "job_key",
                   "print(1)", "API_TOKEN"):
        assert needle in text, needle
    assert "s3cr3t" not in text
    assert _local_apps() == []
    with pytest.raises(TypeError, match="not a tether component task"):
        dryrun(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"arguments do not fit component utils\.python"):
        dryrun(py, bogus=1)



@pytest.mark.parametrize("how", ["direct", "submit"])
def test_termination_signal_of_the_flow_process_cancels_the_job(tmp_path: Path, how: str) -> None:
    import signal
    import subprocess
    import sys

    marker = f"tether-sigterm-{uuid.uuid4().hex}"
    pidfile = tmp_path / "pid"
    script = Path(__file__).with_name("sigterm_flow.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), how, str(pidfile), marker],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 60, "the job to start")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            with get_runner() as runner:
                for app in runner.list("local_cwd"):
                    runner.cancel(app.app_handle)
    text = out.decode(errors="replace")
    assert proc.returncode != 0, text
    assert "cancelling tether job" in text, text
    _assert_job_cancelled_and_gone(pidfile, marker)


def test_secrets_never_reach_the_task_log_artifacts_failure_or_dryrun() -> None:
    """The app of tests.adapters.secret_app prints a secret of every kind and fails."""
    from prefect import flow

    from tests.adapters.secret_app import PARAM_SECRET, leaks
    from tether.adapters.prefect import component_task, dryrun

    leaky = component_task("tests.adapters.secret_app:leaky", scheduler="local_cwd",
                           name="leaky", env={"EXTRA_TOKEN": "SEKRIT_taskenv"})

    @flow
    def leaking() -> JobResult:
        return leaky(api_token=PARAM_SECRET)

    state = leaking(return_state=True)
    assert state.is_failed()
    with pytest.raises(JobFailedError) as failed:
        state.result()
    flow_run_id = state.state_details.flow_run_id
    msgs = wait_for_logs(flow_run_id, "r/0 args ", "DATABASE_URL=postgresql://app:****@",
                         "finished FAILED")
    (task_run,) = _task_runs(flow_run_id)
    arts = _artifacts(flow_run_id)
    (summary,) = [a for a in arts if a.key == "tether-leaky"]
    assert "--token ****" in summary.data and "**FAILED**" in summary.data
    surfaces = {
        "task run log": "\n".join(msgs),
        "failure": str(failed.value),
        "task run state message": str(task_run.state.message),
        "artifacts": "\n".join(str(a.data) for a in arts),
        "dryrun": str(dryrun(leaky, api_token=PARAM_SECRET)),
    }
    print(f"\n[secrets] prefect surfaces checked: {sorted(surfaces)}")
    assert not leaks(surfaces), leaks(surfaces)


def test_progress_artifact_updates_while_the_job_runs(tmp_path: Path) -> None:
    """The job's reports show on the real server while it runs: a progress artifact updated
    in place (its description the report), then a metrics table of the last report."""
    import json
    import threading

    from prefect import flow

    from tests.adapters.progress_app import FIRST, LAST, release_when
    from tether.adapters.prefect import component_task

    train = component_task("tests.adapters.progress_app:training", scheduler="local_cwd",
                           name="trainer", poll_interval=0.2)
    ids: list[Any] = []
    states: list[Any] = []

    @flow
    def training_flow(gate: str) -> JobResult:
        from prefect.runtime import flow_run

        ids.append(flow_run.id)
        return train(gate=gate)

    def progress_artifacts() -> list[Any]:
        return [a for a in _artifacts(ids[0]) if a.type == "progress"] if ids else []

    def first_seen() -> bool:
        return any(a.description == f"tether progress: {FIRST}" and a.data == 25.0
                   for a in progress_artifacts())

    gate = tmp_path / "gate"
    thread = threading.Thread(
        target=lambda: states.append(training_flow(str(gate), return_state=True)))
    thread.start()
    try:
        seen = release_when(first_seen, gate)
        thread.join(120)
        assert not thread.is_alive()
    finally:
        gate.touch()
        thread.join(60)
    assert seen, "no progress artifact showed the first report while the job ran"
    assert states[0].is_completed(), states[0]
    (progress,) = progress_artifacts()  # one artifact, updated in place
    assert progress.key == "tether-trainer-progress" and progress.task_run_id is not None
    assert progress.data == 100.0 and progress.description.startswith(f"tether progress: {LAST}")
    (table,) = [a for a in _artifacts(ids[0]) if a.type == "table"]
    assert table.key == "tether-trainer-metrics"
    rows = {r["metric"]: r["value"] for r in json.loads(table.data)}
    assert rows["loss"] == 0.125 and rows["step"] == 4 and rows["total"] == 4
    assert states[0].result().progress["step"] == 4
