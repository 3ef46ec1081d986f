"""Builtin components take TorchX's parameters: a TorchX user's CLI args still work."""

from __future__ import annotations

import inspect

import pytest

from tether.components import dist, utils
from tether.components.args import materialize
from tether.components.finder import get_component


def test_ddp_has_the_reference_signature() -> None:
    params = list(inspect.signature(dist.ddp).parameters)
    assert params == [
        "script_args", "script", "m", "image", "name", "h", "cpu", "gpu", "memMB", "j", "env",
        "metadata", "max_retries", "rdzv_port", "rdzv_backend", "rdzv_conf", "mounts",
        "debug", "tee",
    ]  # fmt: skip


def test_ddp_metadata_rdzv_conf_and_tee_from_the_command_line() -> None:
    app = materialize(
        get_component("dist.ddp").fn,
        ["--script", "train.py", "-j", "2x2", "--metadata", "team=ml,prio=high",
         "--rdzv_conf", "join_timeout=600,timeout=900", "--tee", "1"],
    )  # fmt: skip
    assert app.metadata == {"team": "ml", "prio": "high"}
    cmd = app.roles[0].args[1]
    assert "--rdzv_conf join_timeout=600,timeout=900" in cmd and "--tee 1" in cmd
    with pytest.raises(ValueError, match="--tee 7"):
        dist.ddp(script="t.py", tee=7)


def test_hydra_component_passes_config_and_overrides() -> None:
    app = materialize(
        get_component("utils.hydra").fn,
        ["--script", "train.py", "--config_name", "sweep", "--multirun", "--", "lr=0.1",
         "+trainer.gpus=1", "~debug"],
    )  # fmt: skip
    (role,) = app.roles
    assert role.entrypoint == "python"
    assert role.args == [
        "train.py", "--config-name", "sweep", "--multirun", "lr=0.1", "+trainer.gpus=1",
        "~debug",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="Hydra overrides must be"):
        utils.hydra("lr", script="t.py")
