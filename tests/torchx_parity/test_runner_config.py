"""TorchX's Runner and ``runner.config`` behaviour, renamed to tether (real local_cwd runs)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tether.runner import config, get_runner
from tether.specs import AppDef, Role


def test_describe_returns_the_submitted_app() -> None:
    role = Role("echo", image="", entrypoint=sys.executable, args=["-c", "print('hi')"])
    app = AppDef("hello", roles=[role], metadata={"team": "ml"})
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        runner.wait(handle, wait_interval=0.1)
        described = runner.describe(handle)
    assert described is not None
    assert described.name == "hello" and described.metadata["team"] == "ml"
    assert described.roles[0].args == ["-c", "print('hi')"]


def test_dryrun_does_not_deep_copy_overrides() -> None:
    async def image() -> str:
        return "built"

    coro = image()  # a coroutine cannot be deep-copied
    role = Role("echo", image="", entrypoint=sys.executable, args=["-c", "pass"],
                overrides={"image": coro})  # fmt: skip
    with get_runner() as runner:
        info = runner.dryrun(AppDef("ov", roles=[role]), "local_cwd")
    assert info.app is not None and info.app.roles[0].image == "built"
    assert role.overrides == {"image": coro}  # the caller's role is not resolved
    coro.close()


def test_dump_then_load_gives_every_optional_option_back() -> None:
    out = io.StringIO()
    config.dump(out, schedulers=["local_cwd"])
    cfg: dict[str, object] = {}
    config.load("local_cwd", io.StringIO(out.getvalue()), cfg)  # type: ignore[arg-type]
    from tether.schedulers.local.scheduler import create_scheduler

    opts = create_scheduler("s").run_opts()
    optional = {k for k, o in opts if not o.is_required}
    assert optional <= set(cfg)
    assert cfg["log_dir"] is None  # an option without a default comes back as None
    assert all(cfg[k] == o.default for k, o in opts if k in optional)


def test_dump_of_an_unknown_scheduler_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no_such_scheduler"):
        config.dump(io.StringIO(), schedulers=["no_such_scheduler"])


def test_load_sections(tmp_path: Path) -> None:
    (tmp_path / ".tetherconfig").write_text(
        "[component:dist.ddp]\nj = 1x2\nimage = ghcr.io/foo:1\n\n[component:utils.echo]\n"
        "msg = hi\n\n[local_cwd]\nlog_dir = /tmp\n"
    )
    assert config.load_sections("component", [str(tmp_path)]) == {
        "dist.ddp": {"j": "1x2", "image": "ghcr.io/foo:1"},
        "utils.echo": {"msg": "hi"},
    }


def test_empty_tetherconfig_turns_config_files_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".tetherconfig").write_text("[local_cwd]\nlog_dir = /tmp/x\n")
    assert config.find_configs([str(tmp_path)]) == [str(tmp_path / ".tetherconfig")]
    monkeypatch.setenv("TETHERCONFIG", "")
    assert config.find_configs([str(tmp_path)]) == []
    cfg: dict[str, object] = {}
    config.apply("local_cwd", cfg, [str(tmp_path)])  # type: ignore[arg-type]
    assert cfg == {}



def test_runner_cfg_from_str_parses_with_the_schedulers_options() -> None:
    with get_runner() as runner:
        cfg = runner.cfg_from_str("local_cwd", "log_dir=/tmp/foobar", "prepend_cwd=True")
        assert cfg == {"log_dir": "/tmp/foobar", "prepend_cwd": True}
        assert runner.cfg_from_str("local_cwd", "grace_period=1", "grace_period=3") == {
            "grace_period": 3
        }
