"""Secrets never show up in dry-runs."""

from __future__ import annotations

import pytest

from tether.specs import AppDef, AppDryRunInfo, Role, is_secret_name, mask_env


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "API_KEY", "WANDB_API_KEY", "GH_PAT_TOKEN",
     "MLFLOW_TRACKING_PASSWORD", "KEY"],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "NCCL_DEBUG", "KEYBOARD_LAYOUT", "MONKEY_COUNT", "TETHER_JOB_KEY"]
)
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_env() -> None:
    assert mask_env({"HF_TOKEN": "abc", "X": "1"}) == {"HF_TOKEN": "****", "X": "1"}


def test_dryrun_info_redacts_secret_values_in_any_rendering() -> None:
    app = AppDef("a", [Role("r", entrypoint="x", env={"HF_TOKEN": "hf_s3cr3t", "X": "1"})])
    info = AppDryRunInfo({"cmd": "echo hf_s3cr3t", "env": app.roles[0].env}, repr)
    info.app = app
    text = str(info)
    assert "hf_s3cr3t" not in text
    assert "****" in text and "'X': '1'" in text
