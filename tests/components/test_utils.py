"""utils.*: the AppDefs users rely on, and their apps run for real."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tether.components.args import ComponentArgError, materialize
from tether.components.finder import get_component
from tether.specs import AppDef


def mat(name: str, argv: list[str]) -> AppDef:
    return materialize(get_component(name).fn, argv, prog=name)


@pytest.fixture
def venv_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`python` in jobs is this interpreter; jobs run in a temp directory."""
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}"
                               f"{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_local(name: str, argv: list[str]) -> tuple[str, str]:
    """Runs a component on local_cwd; returns the final state and replica 0's log."""
    from tether.runner import get_runner

    with get_runner() as runner:
        handle = runner.run_component(name, argv, "local_cwd")
        status = runner.wait(handle, wait_interval=1, timeout=120)
        app = runner.describe(handle)
        assert app is not None
        log = "".join(runner.log_lines(handle, app.roles[0].name, 0))
    assert status is not None
    return status.state.name, log


def test_echo() -> None:
    app = mat("utils.echo", ["--msg", "hi there", "--num_replicas", "2"])
    (role,) = app.roles
    assert (role.entrypoint, role.args, role.num_replicas) == ("echo", ["hi there"], 2)
    assert mat("utils.echo", []).roles[0].args == ["hello world"]


def test_touch() -> None:
    role = mat("utils.touch", ["--file", "/tmp/x.done"]).roles[0]
    assert (role.entrypoint, role.args) == ("touch", ["/tmp/x.done"])
    with pytest.raises(ComponentArgError, match="missing required argument: --file"):
        mat("utils.touch", [])


def test_sh_one_argument_is_a_script_several_are_quoted() -> None:
    role = mat("utils.sh", ["echo $HOME | wc -c"]).roles[0]
    assert (role.entrypoint, role.args) == ("sh", ["-c", "echo $HOME | wc -c"])
    role = mat("utils.sh", ["--env", "A=1", "-h", "cpu.small", "echo", "a b", "$HOME"]).roles[0]
    assert role.args == ["-c", "echo 'a b' '$HOME'"]
    assert role.env["A"] == "1" and role.resource.memMB == 2048
    with pytest.raises(ComponentArgError, match="needs a command"):
        mat("utils.sh", [])


def test_python_forms() -> None:
    role = mat("utils.python", ["-m", "pkg.mod", "--", "--x", "1"]).roles[0]
    assert (role.entrypoint, role.args) == ("python", ["-m", "pkg.mod", "--x", "1"])
    assert mat("utils.python", ["-c", "print(1)"]).roles[0].args == ["-c", "print(1)"]
    app = mat("utils.python", ["--script", "s.py", "--num_replicas", "3", "--gpu", "1", "a"])
    assert app.roles[0].args == ["s.py", "a"] and app.roles[0].num_replicas == 3
    assert app.roles[0].resource.gpu == 1 and app.name == "tether_utils_python"
    with pytest.raises(ComponentArgError, match="exactly one of -m, -c and --script"):
        mat("utils.python", ["-m", "a", "-c", "b"])
    with pytest.raises(ComponentArgError, match="exactly one of -m, -c and --script"):
        mat("utils.python", [])


def test_binary() -> None:
    app = mat("utils.binary", ["--entrypoint", "/bin/ls", "--name", "lister", "-l", "/"])
    role = app.roles[0]
    assert (role.entrypoint, role.args, app.name) == ("/bin/ls", ["-l", "/"], "lister")
    with pytest.raises(ComponentArgError, match="missing required argument: --entrypoint"):
        mat("utils.binary", [])


def test_copy_appdef() -> None:
    role = mat("utils.copy", ["--src", "s3://b/k", "--dst", "/tmp/k"]).roles[0]
    assert role.args == ["-m", "tether.apps.utils.copy_main", "--src", "s3://b/k",
                         "--dst", "/tmp/k"]


def test_booth_appdef() -> None:
    role = mat("utils.booth", ["--x1", "1", "--x2", "3.5", "--trial_idx", "4"]).roles[0]
    assert role.args == ["-m", "tether.apps.utils.booth_main", "--x1", "1.0", "--x2", "3.5",
                         "--trial_idx", "4", "--tracker_base", "/tmp/tether-booth"]


@pytest.mark.slow
def test_copy_runs_as_a_job(venv_path: Path) -> None:
    (venv_path / "src.bin").write_bytes(b"x" * 3000)
    state, log = run_local("utils.copy", ["--src", str(venv_path / "src.bin"),
                                          "--dst", str(venv_path / "out" / "dst.bin")])
    assert state == "SUCCEEDED", log
    assert (venv_path / "out" / "dst.bin").read_bytes() == b"x" * 3000
    assert "copied 3000 bytes" in log


@pytest.mark.slow
def test_booth_runs_as_a_job_and_records_the_value(venv_path: Path) -> None:
    base = venv_path / "booth"
    state, log = run_local("utils.booth", ["--x1", "1", "--x2", "3", "--trial_idx", "2",
                                           "--tracker_base", str(base)])
    assert state == "SUCCEEDED", log
    assert json.loads((base / "2.json").read_text())["booth_eval"] == 0.0
    state, _ = run_local("utils.booth", ["--x1", "0", "--x2", "0", "--tracker_base", str(base)])
    assert json.loads((base / "0.json").read_text())["booth_eval"] == 74.0


@pytest.mark.slow
def test_sh_and_python_run_as_jobs(venv_path: Path) -> None:
    state, log = run_local("utils.sh", ["echo one; echo two >&2; exit 0"])
    assert state == "SUCCEEDED" and "one" in log and "two" in log
    state, log = run_local("utils.sh", ["exit 7"])
    assert state == "FAILED"
    state, log = run_local("utils.python", ["-c", "import sys; print('args', sys.argv[1:])",
                                            "a", "--b"])
    assert state == "SUCCEEDED" and "args ['a', '--b']" in log


def test_copy_app_reports_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    from tether.apps.utils.copy_main import main

    assert main(["--src", str(tmp_path / "missing"), "--dst", str(tmp_path / "x")]) == 1
    assert "cannot copy" in capsys.readouterr().err


def test_process_monitor_start_and_exit_files(tmp_path: Path) -> None:
    """The tensorboard wrapper: waits for the start file, stops the program on the exit file."""
    import subprocess

    start, stop, out = tmp_path / "start", tmp_path / "stop", tmp_path / "out"
    proc = subprocess.Popen([
        sys.executable, "-m", "tether.apps.utils.process_monitor", "--timeout", "60",
        "--poll_interval", "0.1", "--start_on_file", str(start), "--exit_on_file", str(stop),
        "--", sys.executable, "-c",
        f"import time; open({str(out)!r}, 'w').write('started'); time.sleep(60)",
    ])
    try:
        time.sleep(1.0)
        assert not out.exists(), "the program must wait for the start file"
        start.touch()
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.read_text() == "started"
        stop.touch()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_process_monitor_exit_code_and_timeout(tmp_path: Path) -> None:
    from tether.apps.utils.process_monitor import main

    assert main(["--poll_interval", "0.05", "--", sys.executable, "-c", "raise SystemExit(5)"]) == 5
    # stopped at its timeout: waiting for the child's 600 s would outlast the suite's 300 s
    # test timeout and fail the test
    assert main(["--timeout", "0.5", "--poll_interval", "0.05", "--",
                 sys.executable, "-c", "import time; time.sleep(600)"]) == 0
