"""The Runner end to end on the embedded default scheduler (real subprocesses)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_running
from tether.runner import ENV_JOB_ID, UnknownAppError, fan_in, get_runner
from tether.runner.logs import LogReadError
from tether.specs import AppDef, AppState, Role


def _py(name: str, code: str, replicas: int = 1, env: dict[str, str] | None = None) -> Role:
    return Role(name, image="", entrypoint=sys.executable, args=["-c", code],
                num_replicas=replicas, env=env or {})


def test_env_wiring_and_outputs(tmp_path: Path) -> None:
    code = (
        "import os, json; from tether.tracker.outputs import write_output; "
        "print(json.dumps({k: os.environ.get(k) for k in "
        "['TETHER_JOB_ID','TETHER_PARENT_RUN_ID','TETHER_JOB_KEY']})); "
        "write_output('accuracy', 0.93); write_output('model', {'uri': 's3://m'})"
    )
    app = AppDef("wired", [_py("trainer", code)])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd", parent_run_id="parent://run/1", job_key="k-wired")
        status = runner.wait(handle, wait_interval=0.1)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        lines = "".join(runner.log_lines(handle, "trainer", 0))
        assert f'"{ENV_JOB_ID}": "{handle}"' in lines
        assert '"TETHER_PARENT_RUN_ID": "parent://run/1"' in lines
        assert '"TETHER_JOB_KEY": "k-wired"' in lines
        assert runner.outputs(handle) == {"accuracy": 0.93, "model": {"uri": "s3://m"}}
    # the caller's AppDef is not modified by the runner
    assert ENV_JOB_ID not in app.roles[0].env


def test_job_key_reattaches_while_running_and_resubmits_after_failure(tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    flag.write_text("1")
    code = (
        "import os, sys, time; time.sleep(1.0); "
        f"sys.exit(3 if os.path.exists({str(flag)!r}) else 0)"
    )
    app = AppDef("keyed", [_py("r", code)])
    with get_runner() as runner:
        first = runner.run_or_attach(app, "local_cwd", job_key="job-A")
        assert not first.reattached
        again = runner.run_or_attach(app, "local_cwd", job_key="job-A")
        assert again.reattached and again.app_handle == first.app_handle
        other_key = runner.run(app, "local_cwd", job_key="job-B")
        assert other_key != first.app_handle
        st = runner.wait(first.app_handle, wait_interval=0.1)
        assert st is not None and st.state == AppState.FAILED
        flag.unlink()
        # the previous attempt failed: a retry submits a new job
        retry = runner.run_or_attach(app, "local_cwd", job_key="job-A")
        assert not retry.reattached and retry.app_handle != first.app_handle
        st = runner.wait(retry.app_handle, wait_interval=0.1)
        assert st is not None and st.state == AppState.SUCCEEDED
        # a finished, successful job is returned as is
        done = runner.run_or_attach(app, "local_cwd", job_key="job-A")
        assert done.reattached and done.app_handle == retry.app_handle
        keyed = [a for a in runner.list("local_cwd") if a.job_key == "job-A"]
        assert len(keyed) == 2
        runner.wait(other_key, wait_interval=0.1)


def test_fan_in_merges_every_replica_and_redacts_secrets() -> None:
    code = (
        "import os; r=os.environ['TETHER_ROLE_NAME']; k=os.environ['TETHER_REPLICA_ID']; "
        "[print(f'{r}-{k}-line{i}', flush=True) for i in range(3)]; "
        "print('token is', os.environ['HF_TOKEN'])"
    )
    secret = {"HF_TOKEN": "hf_very_secret_value"}
    app = AppDef("fan", [_py("a", code, 2, secret), _py("b", code, 2, secret)])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        lines = [ln.format() for ln in fan_in(runner, handle)]
    for role in ("a", "b"):
        for k in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"{role}/{k} ")]
            assert [ln.split(" ", 1)[1] for ln in got[:3]] == [
                f"{role}-{k}-line{i}" for i in range(3)
            ]
    assert not any("hf_very_secret_value" in ln for ln in lines)
    assert sum("token is ****" in ln for ln in lines) == 4


def test_fan_in_of_one_replica_reads_in_the_consumers_thread() -> None:
    # nothing to merge: no reader thread, the lines in order and masked, a read error as a
    # line (or raised when asked to), and a consumer may leave early
    code = ("import os; [print('line', i, flush=True) for i in range(50)]; "
            "print(os.environ['HF_TOKEN'])")
    app = AppDef("one", [_py("a", code, env={"HF_TOKEN": "hf_very_secret_value"})])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        before = set(threading.enumerate())
        started: list[str] = []
        stream = fan_in(runner, handle)
        lines = []
        for ln in stream:
            started += [t.name for t in threading.enumerate() if t not in before]
            lines.append(ln.format())
        assert started == []
        assert lines == [f"a/0 line {i}" for i in range(50)] + ["a/0 ****"]
        early = fan_in(runner, handle)
        assert next(early).format() == "a/0 line 0"
        early.close()
        bad = [ln.format() for ln in fan_in(runner, handle, regex="(")]
        assert len(bad) == 1 and bad[0].startswith("a/0 [tether] cannot read logs of a/0: "), bad
        with pytest.raises(LogReadError, match="cannot read the logs of a/0: "):
            list(fan_in(runner, handle, regex="(", raise_errors=True))


def test_dryrun_submits_nothing_and_masks_secrets() -> None:
    app = AppDef("dry", [_py("r", "print(1)", env={"DB_PASSWORD": "pw-123456"})])
    with get_runner() as runner:
        before = len(runner.list("local_cwd"))
        info = runner.dryrun(app, "local_cwd")
        text = str(info)
        assert "pw-123456" not in text and sys.executable in text
        assert len(runner.list("local_cwd")) == before


def test_wait_timeout_returns_running_status() -> None:
    app = AppDef("slow", [_py("r", "import time; time.sleep(30)")])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        try:
            wait_running(runner, handle)  # SUBMITTED until its start is confirmed
            st = runner.wait(handle, wait_interval=0.1, timeout=0.5)
            assert st is not None and st.state == AppState.RUNNING
        finally:
            runner.cancel(handle)
        st = runner.wait(handle, wait_interval=0.1, timeout=30)
        assert st is not None and st.state == AppState.CANCELLED


def test_unknown_app_errors() -> None:
    with get_runner() as runner:
        assert runner.status("local_cwd://tether/nope-123") is None
        with pytest.raises(UnknownAppError, match="no app 'local_cwd://tether/nope-123'"):
            list(runner.log_lines("local_cwd://tether/nope-123", "r"))
        runner.cancel("local_cwd://tether/nope-123")  # idempotent, no error


def test_tetherconfig_run_options_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "cfg.ini"
    logs = tmp_path / "custom-logs"
    cfg.write_text(f"[local_cwd]\nlog_dir = {logs}\n")
    monkeypatch.setenv("TETHERCONFIG", str(cfg))
    app = AppDef("cfgd", [_py("r", "print('hello')")])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        runner.wait(handle, wait_interval=0.1)
    assert any(p.name.endswith(".log") for p in logs.rglob("*"))
