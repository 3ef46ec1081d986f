"""Dry-runs show the mode and why, the AppDef, the scheduler's request and the KFP step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tether.adapters.kfp import step


def test_native_dryrun_shows_container_and_pod_settings() -> None:
    dr = step(c.trainer).dryrun(lr="0.5", h="aws_p3.2xlarge")
    assert dr.mode == "native" and "one role of one replica" in dr.reason
    assert dr.scheduler_request is None
    assert dr.app is not None and dr.app["roles"][0]["resource"]["gpu"] == 1
    spec, platform = list(yaml.safe_load_all(dr.kfp_yaml))
    container = spec["deploymentSpec"]["executors"]["exec-trainer"]["container"]
    assert container["args"][:4] == ["-m", "trainer.main", "--lr", "0.5"]
    assert "pvcMount" in platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
        "exec-trainer"]
    text = str(dr)
    assert text.startswith("# KFP step 'trainer' (tests.adapters.kfp.components:trainer): "
                           "native mode")


def test_launcher_dryrun_renders_scheduler_request_with_secrets_masked() -> None:
    st = step("utils.sh", scheduler="local_cwd", env={"API_TOKEN": "hunter2"})
    dr = st.dryrun(args=["echo hi"], env={"HF_TOKEN": "s3cr3t"})
    assert dr.mode == "launcher"
    assert dr.scheduler_request is not None and "sh -c 'echo hi'" in dr.scheduler_request
    text = str(dr)
    assert "s3cr3t" not in text and "hunter2" not in text
    assert "HF_TOKEN=****" in text


def test_dryrun_cli() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tether.adapters.kfp.dryrun", "utils.echo", "-a", "msg=hi",
         "--image", "busybox"],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# KFP step 'utils_echo' (utils.echo): native mode")
    assert "image: busybox" in res.stdout
    assert "RuntimeWarning" not in res.stderr


def _pod(dr_yaml: str, executor: str) -> dict[str, object]:
    parts = list(yaml.safe_load_all(dr_yaml))
    return parts[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]


def test_own_dev_shm_mount_replaces_the_default_and_gpus_need_no_toleration() -> None:
    pod = _pod(step(c.bound).dryrun(mounts=["type=volume,src=shm,dst=/dev/shm"]).kfp_yaml,
               "exec-bound")
    assert "emptyDirMounts" not in pod  # the role's own /dev/shm wins, as on `kubernetes`
    assert pod["pvcMount"][0]["mountPath"] == "/dev/shm"  # type: ignore[index]
    pod = _pod(step(c.trainer).dryrun(gpu=2).kfp_yaml, "exec-trainer")
    assert "tolerations" not in pod  # explicit only (KubernetesOptions), as on `kubernetes`


_TYPED_PIPELINE = '''
from kfp import dsl
from tests.adapters.kfp import components as c
from tether.adapters.kfp import step

fit = step(c.fit)
workers = step(c.workers)


@dsl.pipeline(name="typed")
def typed(lr: float = 0.1, epochs: int = 3, replicas: int = 2) -> None:
    fit(lr=lr, epochs=epochs)
    workers(msg="x", n=replicas)
'''


def test_pipeline_dryrun_shows_each_steps_mode_and_the_fallback(tmp_path: Path) -> None:
    import argparse

    from tether.adapters.kfp.cli import CmdKfp

    path = tmp_path / "typed_pipeline.py"
    path.write_text(_TYPED_PIPELINE)
    res = subprocess.run(
        [sys.executable, "-m", "tether.adapters.kfp.dryrun", f"{path}:typed"],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"# KFP pipeline {path}:typed: 2 tether step(s)"
    assert lines[1].split()[:2] == ["fit", "native"]
    assert lines[2].split()[:2] == ["workers", "launcher"]
    assert ("warning: step 'workers' is a launcher step because parameter 'n' decides role "
            "'worker' num_replicas (the job's shape)") in res.stdout

    # the same as the `tether kfp dryrun` plugin command
    cmd = CmdKfp()
    parser = argparse.ArgumentParser(prog="tether kfp")
    cmd.add_arguments(parser)
    cmd.run(parser.parse_args(["dryrun", f"{path}:typed"]))
