"""TorchX's local scheduler API: its constructor, image providers and ``PATH`` handling.

The apps run as real local processes (the ``local_cwd`` supervisor).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tether.runner import Runner
from tether.schedulers.local_scheduler import (
    CWDImageProvider,
    ImageProvider,
    LocalDirectoryImageProvider,
    LocalScheduler,
    SignalException,
)
from tether.specs import AppDef, AppState, Role


def _script(root: Path, name: str, body: str) -> Path:
    path = root / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _run(sched: LocalScheduler, app: AppDef) -> str:
    with Runner("test", {"local_cwd": lambda session, **kw: sched}) as runner:
        handle = runner.run(app, "local_cwd")
        status = runner.wait(handle, wait_interval=0.1)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        return "".join(runner.log_lines(handle, app.roles[0].name, 0))


def test_constructor_takes_torchx_arguments() -> None:
    sched = LocalScheduler("test", image_provider_class=CWDImageProvider, cache_size=10)
    assert sched.session_name == "test" and sched.backend == "local_cwd"
    with pytest.raises(ValueError, match="cache size must be greater than zero"):
        LocalScheduler("test", CWDImageProvider, cache_size=0)


def test_local_directory_image_provider_runs_in_the_image_dir(tmp_path: Path) -> None:
    img = tmp_path / "img"
    img.mkdir()
    _script(img, "hello.sh", 'echo "hello from $(pwd) img_root=$1"')
    sched = LocalScheduler("test", image_provider_class=LocalDirectoryImageProvider)
    role = Role("hello", image=str(img), entrypoint="hello.sh", args=["${img_root}"])
    out = _run(sched, AppDef("hello", [role]))
    assert f"hello from {img} img_root={img}" in out


def test_local_directory_image_provider_rejects_a_missing_dir(tmp_path: Path) -> None:
    provider = LocalDirectoryImageProvider({})
    assert provider.fetch(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ValueError, match="does not exist or is not a directory"):
        provider.fetch(str(tmp_path / "nope"))


def test_cwd_image_provider_ignores_the_image() -> None:
    provider = CWDImageProvider({})
    assert provider.fetch("foobar:latest") == os.getcwd() == provider.get_cwd("/tmp/foobar")
    role = Role("r", image="x", entrypoint="train.py")
    assert provider.get_entrypoint("/ignored", role) == "train.py"


def test_image_provider_default_entrypoint_joins_the_image_root() -> None:
    class Pulled(ImageProvider):
        def fetch(self, image: str) -> str:
            return f"/images/{image}"

    role = Role("r", image="app", entrypoint="bin/run")
    provider = Pulled()
    assert provider.fetch_role(role) == "/images/app"
    assert provider.get_entrypoint(provider.fetch_role(role), role) == "/images/app/bin/run"
    assert provider.get_cwd("app") is None


def test_cwd_is_appended_to_path_without_prepend_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, "tool.sh", "echo local tool")
    role = Role("r", image="", entrypoint="sh", args=["-c", 'echo "PATH=$PATH"; tool.sh'])
    out = _run(LocalScheduler("test"), AppDef("path", [role]))
    assert "local tool" in out
    path_line = next(line for line in out.splitlines() if line.startswith("PATH="))
    assert path_line.endswith(os.pathsep + str(tmp_path))  # appended: PATH's programs win


def test_prepend_cwd_and_extra_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    extra = tmp_path / "extra"
    extra.mkdir()
    sched = LocalScheduler("test", extra_paths=[str(extra)])
    role = Role("r", image="", entrypoint=sys.executable, args=["-c", "pass"])
    info = sched.submit_dryrun(AppDef("p", [role]), {"prepend_cwd": True})
    (rep,) = info.request.roles["r"]
    assert rep.env["PATH"].split(os.pathsep)[:2] == [str(tmp_path), str(extra)]


def test_signal_exception_carries_the_signal() -> None:
    import signal

    e = SignalException("got SIGTERM", sigval=signal.SIGTERM)
    assert e.sigval == signal.SIGTERM and str(e) == "got SIGTERM"
