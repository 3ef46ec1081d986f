"""TorchX's builtin components and component lookup, renamed to tether."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.components import dist, utils
from tether.components.finder import get_component
from tether.specs import macros


def test_get_component_has_fn_name() -> None:
    info = get_component("dist.ddp")
    assert info.fn_name == "ddp" and info.fn is dist.ddp


def test_spmd_takes_metadata() -> None:
    app = dist.spmd(script="train.py", j="1x1", h="gpu.small", metadata={"team": "ml"})
    assert app.metadata == {"team": "ml"}


def test_ddp_static_rendezvous_passes_node_rank_on_one_node_too() -> None:
    app = dist.ddp(script="train.py", j="1x2", rdzv_backend="static")
    cmd = app.roles[0].args[-1]
    assert "--rdzv_backend static" in cmd and f"--node_rank '{macros.replica_id}'" in cmd


def test_ddp_defaults_loglevel() -> None:
    app = dist.ddp(script="train.py", j="1x1")
    assert app.roles[0].env["LOGLEVEL"]


def test_ddp_sets_tracking_experiment_and_run_names() -> None:
    app = dist.ddp(script="foo/bar.py")
    env = app.roles[0].env
    assert app.name == "bar" and env["TETHER_TRACKING_RUN_NAME"] == "bar"
    assert env["TETHER_TRACKING_EXPERIMENT_NAME"] == "default-experiment"
    named = dist.ddp(script="foo/bar.py", name="exp/run1").roles[0].env
    assert (named["TETHER_TRACKING_EXPERIMENT_NAME"], named["TETHER_TRACKING_RUN_NAME"]) == (
        "exp", "run1")


def test_sh_and_python_default_loglevel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGLEVEL", raising=False)
    assert utils.sh("echo", "hi").roles[0].env["LOGLEVEL"] == "WARNING"
    assert utils.python(c="pass").roles[0].env["LOGLEVEL"] == "WARNING"
    monkeypatch.setenv("LOGLEVEL", "INFO")
    assert utils.sh("echo", "hi").roles[0].env["LOGLEVEL"] == "INFO"
    given = utils.sh("echo", "hi", env={"LOGLEVEL": "DEBUG"}).roles[0].env
    assert given["LOGLEVEL"] == "DEBUG"


def test_copy_takes_mounts() -> None:
    app = utils.copy("file:///tmp/a", "file:///tmp/b", mounts=["type=bind", "src=/data",
                                                              "dst=/data"])
    (mount,) = app.roles[0].mounts
    assert (mount.src_path, mount.dst_path) == ("/data", "/data")


def test_materialize_appdef_with_component_defaults() -> None:
    from tether.components.builders import materialize_appdef

    app = materialize_appdef(utils.echo, ["--num_replicas", "2"], {"msg": "from config"})
    assert app.roles[0].args == ["from config"] and app.roles[0].num_replicas == 2
    app = materialize_appdef(utils.echo, ["--msg", "given"], {"msg": "from config"})
    assert app.roles[0].args == ["given"]


def test_materialize_appdef_bad_argument_exits_as_argparse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.components.builders import materialize_appdef

    with pytest.raises(SystemExit) as e:
        materialize_appdef(utils.copy, ["--src", "a"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "--dst" in err
    with pytest.raises(SystemExit):
        materialize_appdef(utils.echo, ["--bogus", "x"])
    with pytest.raises(ValueError, match="needs a command"):  # the component's own error
        materialize_appdef(utils.sh, [])


def test_parse_args_gives_a_namespace() -> None:
    from tether.components.builders import parse_args

    ns = parse_args(utils.sh, ["--env", "A=1", "echo", "hi"], {"num_replicas": "3"})
    assert ns.args == ["echo", "hi"] and ns.env == {"A": "1"} and ns.num_replicas == 3
    assert ns.image == utils.DEFAULT_IMAGE


def test_get_component_of_an_invalid_component_reports_it(tmp_path: Path) -> None:
    # a deliberate difference (docs/migrating-from-torchx.md): the info, not an exception
    from tether.components.args import InvalidComponentError, materialize

    path = tmp_path / "bad.py"
    path.write_text("from tether.specs import AppDef\n\n"
                    "def trainer(x) -> AppDef:\n    return None\n")
    info = get_component(f"{path}:trainer")
    assert not info.is_valid and info.validation_errors
    with pytest.raises(InvalidComponentError, match="not a valid component"):
        materialize(info.fn, [])
