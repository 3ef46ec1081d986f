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
