"""local_cwd as a TorchX user runs it: ``prepend_cwd`` makes scripts in the project resolve."""

from __future__ import annotations

import os
import stat
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


def test_without_prepend_cwd_path_is_untouched(tmp_path: Path) -> None:
    app = AppDef("p", roles=[Role("r", image=str(tmp_path), entrypoint="true")])
    with Runner("t") as runner:
        info = runner.dryrun(app, "local_cwd", cfg={"cwd": str(tmp_path)})
        assert f"PATH={tmp_path}" not in str(info)
