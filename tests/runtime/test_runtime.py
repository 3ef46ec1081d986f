"""tether.runtime: rank, local rank, world size and device, in and out of a process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.infra.ports import free_port
from tether import runtime


@pytest.fixture
def no_dist_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.usefixtures("no_dist_env")
def test_alone_without_env() -> None:
    assert (runtime.rank(), runtime.local_rank(), runtime.world_size()) == (0, 0, 1)
    assert runtime.is_rank0()


@pytest.mark.usefixtures("no_dist_env")
def test_from_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert (runtime.rank(), runtime.local_rank(), runtime.world_size()) == (5, 1, 8)
    assert not runtime.is_rank0()


@pytest.mark.usefixtures("no_dist_env")
def test_bad_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match=r"\$RANK='one' is not an integer"):
        runtime.rank()


def test_import_does_not_import_torch() -> None:
    code = ("import sys, tether.runtime as r; "
            "print(r.rank(), r.world_size(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "RANK": "2", "WORLD_SIZE": "4"})
    assert out.stdout.split() == ["2", "4", "False"]


@pytest.fixture
def gloo_group(no_dist_env: None, tmp_path: Path) -> Iterator[None]:
    """A real single-process gloo process group (world size 1)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("gloo_group")
def test_inside_an_initialized_gloo_group(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    # the group wins over conflicting env values
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "9")
    assert runtime.rank() == 0 and runtime.world_size() == 1
    assert runtime.local_device() == torch.device("cpu")
    monkeypatch.delenv("RANK")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert runtime.local_rank() == 0
    assert any("LOCAL_RANK is not set" in str(w.message) for w in caught)


@pytest.mark.usefixtures("no_dist_env")
def test_local_device_without_group_on_this_host() -> None:
    import torch

    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert runtime.local_device() == expected


@pytest.mark.slow
def test_under_torchrun_with_two_processes(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        import torch.distributed as dist
        from tether import runtime
        before = [runtime.rank(), runtime.local_rank(), runtime.world_size()]
        with runtime.process_group("gloo"):
            after = [runtime.rank(), runtime.local_rank(), runtime.world_size(),
                     str(runtime.local_device())]
            with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
                json.dump({"before": before, "after": after}, f)
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
         "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{free_port()}",
         str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted(d["before"] for d in docs) == [[0, 0, 2], [1, 1, 2]]
    assert sorted(d["after"] for d in docs) == [[0, 0, 2, "cpu"], [1, 1, 2, "cpu"]]


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU")
def test_local_device_under_nccl_is_the_local_cuda_device(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import torch.distributed as dist
        from tether import runtime
        dist.init_process_group("nccl")
        print("PROBE", runtime.local_device(), flush=True)
        dist.destroy_process_group()
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
         "--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{free_port()}", str(script)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "PROBE cuda:0" in proc.stdout


def _torchrun(script: Path, *args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
         str(nproc), "--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{free_port()}",
         str(script), *args],
        capture_output=True, text=True, timeout=240, check=False,
    )


@pytest.mark.slow
def test_process_group_one_rank_leaves_long_after_the_other(tmp_path: Path) -> None:
    """Rank 0 is busy for seconds after rank 1 is done: both tear down cleanly, exit 0."""
    script = tmp_path / "skew.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import torch
        from tether.runtime import process_group, rank
        with process_group() as dist:
            t = torch.ones(1)
            dist.all_reduce(t)
            if rank() == 0:
                time.sleep(3)  # e.g. saving a checkpoint while rank 1 has nothing left to do
            print(f"rank {rank()} leaving", flush=True)
        print(f"rank {os.environ['RANK']} left, initialized={dist.is_initialized()}", flush=True)
    """))
    proc = _torchrun(script)
    assert proc.returncode == 0, proc.stderr
    for r in (0, 1):
        assert f"rank {r} left, initialized=False" in proc.stdout


@pytest.mark.slow
def test_process_group_a_failing_rank_exits_with_its_error(tmp_path: Path) -> None:
    """A rank that raises skips the final barrier: the job ends with its error, not a hang."""
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent("""
        from tether.runtime import process_group, rank
        with process_group():
            if rank() == 1:
                raise SystemExit("rank 1 found bad data")
    """))
    proc = _torchrun(script)
    assert proc.returncode != 0
    assert "rank 1 found bad data" in proc.stderr


def test_process_group_defaults_to_gloo_without_cuda() -> None:
    import torch

    expected = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() else "gloo"
    assert runtime.default_backend() == expected
