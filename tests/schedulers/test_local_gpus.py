"""``auto_set_cuda_visible_devices`` of local_cwd, and counting the host's GPUs."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from tether.schedulers.gpus import count_nvidia_smi_gpus, host_gpu_count
from tether.schedulers.local import create_scheduler
from tether.schedulers.local.render import LocalRequest
from tether.specs import AppDef, Resource, Role


def gpu_role(name: str, replicas: int, gpus: int, env: dict[str, str] | None = None) -> Role:
    return Role(
        name,
        entrypoint=sys.executable,
        args=["-c", "pass"],
        num_replicas=replicas,
        resource=Resource(cpu=1, gpu=gpus, memMB=1024),
        env=env or {},
    )


def visible_devices(roles: list[Role], autoset: bool = True, gpus: int = 8) -> dict[str, list]:
    sched = create_scheduler("test", gpu_count=gpus)
    info = sched.submit_dryrun(AppDef("gpus", roles), {"auto_set_cuda_visible_devices": autoset})
    req = info.request
    assert isinstance(req, LocalRequest)
    return {
        role: [r.env.get("CUDA_VISIBLE_DEVICES") for r in reps] for role, reps in req.roles.items()
    }


def test_replicas_get_consecutive_devices() -> None:
    # the examples of the reference, on a host with 8 GPUs
    assert visible_devices([gpu_role("a", 2, 2)]) == {"a": ["0,1", "2,3"]}
    assert visible_devices([gpu_role("a", 1, 2), gpu_role("b", 3, 1)]) == {
        "a": ["0,1"],
        "b": ["2", "3", "4"],
    }


def test_roles_without_gpus_are_skipped_and_role_env_is_overridden() -> None:
    roles = [
        gpu_role("a", 1, 2, env={"CUDA_VISIBLE_DEVICES": "7"}),
        gpu_role("cpu", 2, 0),
        Role("default", entrypoint=sys.executable),  # NULL_RESOURCE: gpu=-1
        gpu_role("b", 2, 3),
    ]
    assert visible_devices(roles) == {
        "a": ["0,1"],
        "cpu": [None, None],
        "default": [None],
        "b": ["2,3,4", "5,6,7"],
    }


def test_too_few_gpus_sets_nothing_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert visible_devices([gpu_role("a", 3, 4)]) == {"a": [None, None, None]}
    assert "this host has 8 GPU(s) but" in caplog.text and "ask for 12 in total" in caplog.text


def test_gpu_replicas_without_the_option_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert visible_devices([gpu_role("a", 2, 1)], autoset=False) == {"a": [None, None]}
    assert "auto_set_cuda_visible_devices=True" in caplog.text
    assert "2 replica(s)" in caplog.text


def test_apps_without_gpus_neither_warn_nor_ask_the_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom() -> int:
        raise AssertionError("the GPU count is not needed")

    sched = create_scheduler("test", gpu_count=boom)
    with caplog.at_level(logging.WARNING):
        for autoset in (True, False):
            sched.submit_dryrun(
                AppDef("cpu", [gpu_role("a", 2, 0)]), {"auto_set_cuda_visible_devices": autoset}
            )
    assert caplog.text == ""


def test_count_from_the_driver_directory(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
    assert host_gpu_count(str(tmp_path)) == 4


def test_count_from_nvidia_smi_listing() -> None:
    listing = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-a)\n"
        "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n"
    )
    assert count_nvidia_smi_gpus(listing) == 2
    assert count_nvidia_smi_gpus("") == 0


def test_host_without_driver_has_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    assert host_gpu_count(str(tmp_path / "missing")) == 0
