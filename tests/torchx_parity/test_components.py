"""TorchX's builtin components and component lookup, renamed to tether."""

from __future__ import annotations

from tether.components import dist
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
