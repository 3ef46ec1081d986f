"""local_cwd as a TorchX user runs it: ``prepend_cwd`` makes scripts in the project resolve."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from tether.runner import Runner
from tether.specs import AppDef, AppState, Role


def _script(d: Path, name: str, text: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\n" + text)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def test_prepend_cwd_resolves_bare_and_dot_slash_entrypoints(tmp_path: Path) -> None:
    _script(tmp_path, "train.py", 'echo "trained $1"\n')
    _script(tmp_path, "run.sh", "echo ran\n")
    app = AppDef(
        "compat",
        roles=[
            Role("bare", image=str(tmp_path), entrypoint="train.py", args=["x"]),
            Role("dot", image=str(tmp_path), entrypoint="./run.sh"),
        ],
    )
    with Runner("t") as runner:
        info = runner.dryrun(app, "local_cwd", cfg={"cwd": str(tmp_path), "prepend_cwd": True})
        assert f"PATH={tmp_path}{os.pathsep}" in str(info)
        handle = runner.schedule(info)
        status = runner.wait(handle, wait_interval=0.2, timeout=60)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert "".join(runner.log_lines(handle, "bare", 0)) == "trained x\n"
        assert "".join(runner.log_lines(handle, "dot", 0)) == "ran\n"


def test_without_prepend_cwd_the_cwd_is_appended_to_path(tmp_path: Path) -> None:
    _script(tmp_path, "tool.sh", "echo local tool\n")
    app = AppDef("p", roles=[Role("r", image=str(tmp_path), entrypoint="tool.sh")])
    with Runner("t") as runner:
        info = runner.dryrun(app, "local_cwd", cfg={"cwd": str(tmp_path)})
        (rep,) = info.request.roles["r"]
        assert rep.env["PATH"] == f"{os.environ['PATH']}{os.pathsep}{tmp_path}"
        handle = runner.schedule(info)
        status = runner.wait(handle, wait_interval=0.2, timeout=60)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert "".join(runner.log_lines(handle, "r", 0)) == "local tool\n"


def test_exit_with_launcher_cancels_on_close_default_is_durable(tmp_path: Path) -> None:
    app = AppDef("tied", roles=[Role("s", image=str(tmp_path), entrypoint="sleep", args=["60"])])
    with Runner("t") as runner:
        tied = runner.run(app, "local_cwd", cfg={"exit_with_launcher": True})
        durable = runner.run(app, "local_cwd")
    with Runner("t") as observer:
        st = observer.wait(tied, wait_interval=0.2, timeout=60)
        assert st is not None and st.state == AppState.CANCELLED
        # the durable app lives on: SUBMITTED until its supervisor confirms its replica
        # started (under load that can come after the tied app's cancel), then RUNNING
        st = observer.status(durable)
        deadline = time.monotonic() + 60
        while st is not None and st.state == AppState.SUBMITTED and time.monotonic() < deadline:
            time.sleep(0.05)
            st = observer.status(durable)
        assert st is not None and st.state in (AppState.RUNNING, AppState.PENDING), st
        observer.cancel(durable)


def test_exit_with_launcher_cancels_when_the_launching_process_exits(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        from tether.runner import Runner
        from tether.specs import AppDef, Role
        app = AppDef("tied", roles=[Role("s", image={str(tmp_path)!r}, entrypoint="sleep",
                                         args=["60"])])
        runner = Runner("t")
        print(runner.run(app, "local_cwd", cfg={{"exit_with_launcher": True}}), flush=True)
        # exits without closing the runner: the atexit hook cancels the app
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ},
    )  # fmt: skip
    handle = proc.stdout.strip().splitlines()[-1]
    with Runner("t") as observer:
        st = observer.wait(handle, wait_interval=0.2, timeout=60)
        assert st is not None and st.state == AppState.CANCELLED


def test_scheduler_submit_with_workspace_runs_in_it(tmp_path: Path) -> None:
    from tether.schedulers.local.scheduler import create_scheduler
    from tether.specs import make_app_handle

    (tmp_path / "marker.txt").write_text("here\n")
    app = AppDef("ws", roles=[Role("r", entrypoint="cat", args=["marker.txt"])])
    sched = create_scheduler("t")
    try:
        app_id = sched.submit(app, {}, workspace=str(tmp_path))
    finally:
        sched.close()
    assert app.roles[0].workspace is None  # the caller's app is not modified
    handle = make_app_handle("local_cwd", "t", app_id)
    with Runner("t") as runner:
        st = runner.wait(handle, wait_interval=0.2, timeout=60)
        assert st is not None and st.state == AppState.SUCCEEDED, st
        assert "".join(runner.log_lines(handle, "r", 0)) == "here\n"
