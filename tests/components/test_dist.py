"""dist.ddp and dist.spmd: the torchrun command line, env, resources and replicas users rely on."""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tests.e2e.infra.ports import free_port
from tether.components.args import ComponentArgError, materialize
from tether.components.dist import TORCH_DEBUG_FLAGS, ddp, spmd
from tether.components.finder import get_component
from tether.specs import AppDef, BindMount, macros


def run_cli_style(name: str, argv: list[str]) -> AppDef:
    return materialize(get_component(name).fn, argv, prog=name)


def torchrun_argv(app: AppDef, replica: int = 0) -> list[str]:
    """The bash command of a replica after the scheduler filled the macros, split like bash."""
    role = app.roles[0]
    assert role.entrypoint == "bash" and role.args[0] == "-c"
    filled = macros.Values(img_root="/w", app_id="app-1", replica_id=str(replica),
                           rank0_env="TETHER_RANK0_HOST").apply(role)
    return shlex.split(filled.args[1])


def opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_ddp_single_node_defaults() -> None:
    app = run_cli_style("dist.ddp", ["--script", "train.py", "--", "--lr", "0.1"])
    role = app.roles[0]
    argv = torchrun_argv(app)
    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    assert opt(argv, "--nnodes") == "1" and opt(argv, "--nproc_per_node") == "2"
    assert opt(argv, "--rdzv_backend") == "c10d"
    assert opt(argv, "--rdzv_endpoint") == "localhost:0"  # free port on one node
    assert opt(argv, "--rdzv_id") == "app-1"
    assert opt(argv, "--role") == "train"
    assert argv[-3:] == ["train.py", "--lr", "0.1"]
    assert app.name == "train" and role.name == "train"
    assert role.num_replicas == 1 and role.min_replicas is None
    assert (role.resource.cpu, role.resource.gpu, role.resource.memMB) == (2, 0, 1024)
    assert role.port_map == {"c10d": 29500}
    assert role.env["TETHER_TRACKING_EXPERIMENT_NAME"] == "default-experiment"
    assert role.env["LOGLEVEL"] in (os.environ.get("LOGLEVEL", "WARNING"),)


def test_ddp_multi_node_rendezvous_on_rank0_host() -> None:
    app = run_cli_style("dist.ddp", ["-j", "2x4", "--rdzv_port", "30001", "-m", "pkg.train"])
    role = app.roles[0]
    assert role.num_replicas == 2 and role.port_map == {"c10d": 30001}
    raw = role.args[1]
    filled = macros.Values(img_root="/w", app_id="a", replica_id="1",
                           rank0_env="TETHER_RANK0_HOST").apply(role).args[1]
    # the rank-0 host variable stays unquoted so bash expands it, defaulting to localhost
    assert "${TETHER_RANK0_HOST:=localhost}:30001" in filled
    assert "$${${rank0_env}:=localhost}" in raw
    argv = torchrun_argv(app)
    assert opt(argv, "--nnodes") == "2" and opt(argv, "--nproc_per_node") == "4"
    assert argv[-2:] == ["-m", "pkg.train"]
    assert app.name == "train"


def test_ddp_elastic_sets_min_replicas() -> None:
    app = run_cli_style("dist.ddp", ["-j", "1:3x2", "--script", "t.py"])
    role = app.roles[0]
    assert (role.min_replicas, role.num_replicas) == (1, 3)
    assert opt(torchrun_argv(app), "--nnodes") == "1:3"


def test_ddp_static_backend_passes_node_rank() -> None:
    app = run_cli_style("dist.ddp", ["-j", "2x1", "--rdzv_backend", "static", "--script", "t.py"])
    argv = torchrun_argv(app, replica=1)
    assert opt(argv, "--rdzv_backend") == "static" and opt(argv, "--node_rank") == "1"


def test_ddp_structured_name_named_resource_env_mounts_debug_retries() -> None:
    app = run_cli_style("dist.ddp", [
        "--script", "t.py", "--name", "exp1/run7", "-h", "gpu.small", "--env", "A=1,B=2",
        "--mounts", "type=bind,src=/data,dst=/mnt/data,readonly", "--debug",
        "--max_retries", "3", "--image", "my/img:1",
    ])
    role = app.roles[0]
    assert app.name == "run7"
    assert role.env["TETHER_TRACKING_EXPERIMENT_NAME"] == "exp1"
    assert role.env["A"] == "1" and role.env["B"] == "2"
    for k, v in TORCH_DEBUG_FLAGS.items():
        assert role.env[k] == v
    assert (role.resource.cpu, role.resource.gpu) == (8, 1)  # gpu.small wins over --cpu
    assert role.mounts == [BindMount(src_path="/data", dst_path="/mnt/data", read_only=True)]
    assert role.max_retries == 3 and role.image == "my/img:1"


@pytest.mark.parametrize(
    ("name", "exp", "run"),
    [("/", "default-experiment", "t"), ("e/", "e", "t"), ("/r", "default-experiment", "r"),
     ("r", "default-experiment", "r"), ("e/r", "e", "r")],
)
def test_ddp_name_forms(name: str, exp: str, run: str) -> None:
    app = ddp(script="t.py", name=name)
    assert app.name == run
    assert app.roles[0].env["TETHER_TRACKING_EXPERIMENT_NAME"] == exp


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-j", "1x2"], "exactly one of --script and -m"),
        (["--script", "a.py", "-m", "b"], "exactly one of --script and -m"),
        (["--script", "a.py", "-j", "2"], "has no x{nproc_per_node}"),
        (["--script", "a.py", "-j", "axb"], "is not [{min_nnodes}:]{nnodes}x{nproc_per_node}"),
        (["--script", "a.py", "-j", "3:2x1"], "min_nnodes (3) must be between 0 and nnodes"),
        (["--script", "a.py", "--rdzv_backend", "etcd"], "is not supported; use one of"),
        (["--script", "a.py", "--name", "a/b/c"], "more than one '/'"),
        (["--script", "a.py", "-h", "gpu.smal"], "unknown named resource 'gpu.smal'"),
    ],
)
def test_ddp_user_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ComponentArgError) as ei:
        run_cli_style("dist.ddp", argv)
    assert message in str(ei.value)
    assert ei.value.usage.startswith("usage: dist.ddp")


def test_spmd_infers_nproc_from_gpu_count() -> None:
    app = run_cli_style("dist.spmd", ["-j", "2", "-h", "gpu.xlarge", "--script", "t.py"])
    argv = torchrun_argv(app)
    assert opt(argv, "--nnodes") == "2" and opt(argv, "--nproc_per_node") == "8"
    assert app.roles[0].resource.gpu == 8 and app.roles[0].num_replicas == 2
    # default: one node of gpu.small (1 GPU)
    assert opt(torchrun_argv(spmd(script="t.py")), "--nproc_per_node") == "1"


def test_spmd_explicit_nproc_and_errors() -> None:
    assert opt(torchrun_argv(spmd(script="t.py", h="gpu.medium", j="1:2x2")), "--nnodes") == "1:2"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spmd(script="t.py", h="gpu.small", j="1x4")
    assert any("processes will share GPUs" in str(w.message) for w in caught)
    with pytest.raises(ComponentArgError, match=r"named resource 'cpu\.small' has no GPUs"):
        run_cli_style("dist.spmd", ["-h", "cpu.small", "-j", "2", "--script", "t.py"])


@pytest.mark.slow
def test_ddp_two_nodes_rendezvous_for_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """Two torchrun agents (the two "nodes" of -j 2x1) meet at rank 0's host via bash."""
    from tether.runner import get_runner

    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}"
                               f"{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "world.py").write_text(textwrap.dedent("""
        import os
        print(f"rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']}", flush=True)
    """))
    with get_runner() as runner:
        handle = runner.run_component(
            "dist.ddp", ["-j", "2x1", "--rdzv_port", str(free_port()), "--script", "world.py"],
            "local_cwd",
        )
        status = runner.wait(handle, wait_interval=1, timeout=240)
        logs = {k: "".join(runner.log_lines(handle, "world", k)) for k in (0, 1)}
    assert status is not None and status.state.name == "SUCCEEDED", (status, logs)
    assert sorted(line.split("]:", 1)[1] for log in logs.values()
                  for line in log.splitlines() if "rank=" in line) == [
        "rank=0 world=2", "rank=1 world=2"]
