"""Launcher steps for real: kfp.local's SubprocessRunner runs them, they run jobs on local_cwd.

Also the launcher's runtime on its own: re-attaching by KFP run/task, and SIGTERM -> cancel.
No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("kfp")

from tether.adapters.common import JobFailedError
from tether.adapters.kfp import LauncherOptions, step
from tether.adapters.kfp.launch import StepIds, launch, output_values, step_job_key
from tether.adapters.kfp.spec import LaunchSpec
from tether.runner import get_runner
from tether.specs import AppState

pytestmark = pytest.mark.filterwarnings(
    "ignore:You may be attemping to run a task:RuntimeWarning")  # kfp.local: image name

COMP = "tests.adapters.kfp.components"
FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)


def test_outputs_flow_to_the_next_step(kfp_subprocess: Path, capfd: pytest.CaptureFixture[str]
                                       ) -> None:
    from kfp import dsl

    publish = step(f"{COMP}:publish", scheduler="local_cwd", launcher=FAST,
                   outputs={"message": str, "length": int, "ratio": float})
    workers = step(f"{COMP}:workers", scheduler="local_cwd", launcher=FAST)

    @dsl.pipeline(name="outputs-flow")
    def pipeline(msg: str = "hello") -> float:
        out = publish(msg=msg, times=2)
        workers(msg=out.outputs["message"], n=out.outputs["length"])
        return out.outputs["ratio"]

    task = pipeline(msg="kfp")
    assert task.output == 1.5  # len("kfp") / 2, published by the job, typed float

    log = capfd.readouterr().out
    # the step's log carries every replica's lines, prefixed role/replica
    assert "publish/0 line 0: kfp" in log and "publish/0 line 1: kfp" in log
    for k in range(3):  # n = length of "kfp" = 3 replicas, each got the upstream output
        assert f"worker/{k} KFP from replica {k}" in log
    assert "[tether] launched local_cwd://" in log

    with get_runner() as runner:
        apps = runner.list("local_cwd")
    assert sorted(a.state.name for a in apps) == ["SUCCEEDED", "SUCCEEDED"]


def test_failed_job_fails_the_step_with_its_error(kfp_subprocess: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import dsl

    publish = step(f"{COMP}:publish", scheduler="local_cwd", launcher=FAST)

    @dsl.pipeline(name="job-fails")
    def pipeline() -> None:
        publish(msg="boom", fail=True)

    with pytest.raises(RuntimeError, match=r"finished with status .*FAILURE"):
        pipeline()
    log = capfd.readouterr().out
    assert "publish/0 line 0: boom" in log
    assert "finished FAILED" in log and "exited with code 3" in log


def test_missing_declared_output_fails_the_step(kfp_subprocess: Path,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import dsl

    publish = step(f"{COMP}:publish", scheduler="local_cwd", launcher=FAST,
                   outputs=["model_uri"])

    @dsl.pipeline(name="missing-output")
    def pipeline() -> None:
        publish(msg="x")

    with pytest.raises(RuntimeError, match="FAILURE"):
        pipeline()
    log = capfd.readouterr().out
    assert "did not publish the declared output(s) 'model_uri'" in log
    assert "(it published: length, message, ratio)" in log


# ---- the launcher's runtime ------------------------------------------------------------------


def spec(component: str, **kw: object) -> LaunchSpec:
    return LaunchSpec(component=f"{COMP}:{component}", scheduler="local_cwd",
                      wait_interval=0.2, cancel_grace=10.0, **kw)  # type: ignore[arg-type]


def test_retried_step_reattaches_instead_of_duplicating() -> None:
    ids = StepIds(run_id="run-1", task_name="publish", task_id="42")
    lines: list[str] = []
    first = launch(spec("publish"), {"msg": "once"}, ids, sink=lines.append)
    assert first.succeeded and not first.reattached
    again = launch(spec("publish"), {"msg": "once"}, ids, sink=lines.append)
    assert again.reattached and again.app_handle == first.app_handle
    assert again.outputs == {"message": "ONCE", "length": 4, "ratio": 2.0}
    assert any(line.startswith("[tether] re-attached to " + first.app_handle) for line in lines)
    other = launch(spec("publish"), {"msg": "once"}, StepIds("run-2", "publish", "42"),
                   sink=lines.append)
    assert other.app_handle != first.app_handle  # another run is another job
    with get_runner() as runner:
        assert len(runner.list("local_cwd")) == 2
        app = runner.describe(first.app_handle)
    assert app is not None
    env = app.roles[0].env  # the job knows its KFP run (tracking lineage) and its identity
    assert env["TETHER_PARENT_RUN_ID"] == "kfp:run-1"
    assert env["TETHER_JOB_KEY"] == step_job_key("run-1", "publish", "42")


def test_outputs_are_typed_and_checked() -> None:
    s = spec("publish", outputs=[("length", "float"), ("message", "str")])
    result = launch(s, {"msg": "abc"}, StepIds(), sink=lambda _: None)
    handle, all_json, length, message = output_values(s, result)
    assert handle == result.app_handle
    assert json.loads(all_json) == {"message": "ABC", "length": 3, "ratio": 1.5}
    assert (length, message) == (3.0, "ABC")
    bad = spec("publish", outputs=[("message", "int")])
    with pytest.raises(ValueError, match=r"output 'message' .* is declared int but the job "
                                         r"published 'ABC'"):
        output_values(bad, result)


def test_run_step_raises_job_error() -> None:
    from tether.adapters.kfp.launch import run_step

    with pytest.raises(JobFailedError, match="exited with code 3"):
        run_step(spec("publish").to_json(), {"msg": "x", "fail": True})


def test_sigterm_cancels_the_job(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "tether.adapters.kfp.launch",
           "--spec", spec("sleeper").to_json(), "--args", json.dumps({"seconds": 120}),
           "--run-id", "run-term", "--task-name", "sleeper", "--task-id", "7",
           "--result", str(result_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ.copy())
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    try:
        for line in proc.stdout:
            seen.append(line)
            if "sleeper/0 sleeping" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "step terminated by signal 15: cancelling local_cwd://" in out
    key = step_job_key("run-term", "sleeper", "7")
    with get_runner() as runner:
        found = runner.find_job("local_cwd", key)
    assert found is not None, out
    assert found.status.state == AppState.CANCELLED, out
    assert not result_file.exists()  # terminated: no result


def test_signal_during_submit_is_delivered_after_it() -> None:
    from tether.adapters.kfp.launch import _StopSignals, _Terminated

    reached_end_of_block = False
    with pytest.raises(_Terminated) as e, _StopSignals() as signals, signals.held():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, and only records the signal
        reached_end_of_block = True
    assert reached_end_of_block and e.value.signum == signal.SIGTERM


def test_step_recovers_a_failed_attempt_without_a_kfp_retry(
    kfp_subprocess: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A step whose app has a recovery policy: its first attempt fails, the launcher (the
    follower) submits attempt 1 under the same logical job, and the step succeeds once,
    with no retry by KFP."""
    from kfp import dsl

    flaky = step("tests.adapters.recovering_app:flaky", scheduler="local_cwd", launcher=FAST)
    ckpt = tmp_path / "ckpt"

    @dsl.pipeline(name="recovers")
    def pipeline() -> None:
        flaky(ckpt=str(ckpt))

    pipeline()
    log = capfd.readouterr().out
    assert "[tether] launched chain://" in log
    assert log.count("[tether] attempt 0 on local_cwd") == 1
    assert "train/0 training, attempt 0" in log and "train/0 training, attempt 1" in log
    assert (ckpt / "attempts").read_text() == "0\n1\n"
    assert "finished SUCCEEDED" in log


class _Tee:
    """sys.stdout that also keeps what was written (kfp.local prints the step's log lines)."""

    def __init__(self, out: object) -> None:
        self.out = out
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return self.out.write(s)  # type: ignore[attr-defined, no-any-return]

    def flush(self) -> None:
        self.out.flush()  # type: ignore[attr-defined]


def test_progress_shows_in_the_step_log_while_the_job_runs(
        kfp_subprocess: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from kfp import dsl

    from tests.adapters.progress_app import FIRST, LAST, release_when

    train = step("tests.adapters.progress_app:training", scheduler="local_cwd", launcher=FAST)

    @dsl.pipeline(name="progress")
    def pipeline(gate: str) -> None:
        train(gate=gate)

    tee = _Tee(sys.stdout)
    monkeypatch.setattr(sys, "stdout", tee)
    gate = tmp_path / "gate"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            pipeline(gate=str(gate))
        except BaseException as e:
            errors.append(e)

    runner_thread = threading.Thread(target=run)
    runner_thread.start()
    seen = release_when(lambda: f"[tether] progress: {FIRST}" in tee.text, gate)
    runner_thread.join(300)
    assert seen, "the first progress report never reached the step's log while the job ran"
    assert not errors and not runner_thread.is_alive()
    assert f"[tether] progress: {LAST}" in tee.text  # the last report, read after the job ended


def test_the_last_report_lands_in_the_steps_metrics_artifact(kfp_subprocess: Path,
                                                            tmp_path: Path) -> None:
    from kfp import dsl
    from kfp.dsl import Metrics

    from tests.adapters.progress_app import release_when

    train = step("tests.adapters.progress_app:training", scheduler="local_cwd", launcher=FAST)

    @dsl.pipeline(name="progress-metrics")
    def pipeline(gate: str) -> Metrics:
        return train(gate=gate).outputs["tether_metrics"]

    gate = tmp_path / "gate"
    release_when(lambda: True, gate)  # the job runs through: the artifact holds its last report
    metrics = pipeline(gate=str(gate)).output

    assert isinstance(metrics, Metrics)
    assert metrics.metadata["loss"] == 0.125
    assert metrics.metadata["step"] == 4 and metrics.metadata["total"] == 4
    assert "eta_s" in metrics.metadata
    with open(metrics.path, encoding="utf-8") as f:
        saved = json.load(f)  # the artifact's file (what KFP uploads): the report itself
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"loss": 0.125})
