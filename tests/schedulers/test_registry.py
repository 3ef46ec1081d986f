"""The scheduler registry: lazy built-ins, plugins, clashes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

import tether.schedulers as reg


def test_importing_the_registry_imports_no_backend() -> None:
    code = (
        "import sys, tether.schedulers, tether.runner; "
        "bad=[m for m in sys.modules if m.startswith(('tether.schedulers.local',"
        "'tether.schedulers.kube','kubernetes','boto3','airflow','prefect','kfp','mlflow',"
        "'torch'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_default_is_local_cwd() -> None:
    assert reg.get_default_scheduler_name() == "local_cwd"
    assert next(iter(reg.get_scheduler_factories())) == "local_cwd"


def test_unknown_scheduler_suggests() -> None:
    with pytest.raises(KeyError) as ei:
        reg.get_scheduler_factory("local_cdw")
    assert "Did you mean local_cwd" in str(ei.value)


def test_plugin_clash_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [EntryPoint("local_cwd", "my.pkg:create", reg.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(reg, "entry_points", lambda group: fake)
    with pytest.raises(reg.SchedulerRegistryError) as ei:
        reg.get_scheduler_factories()
    msg = str(ei.value)
    assert "my.pkg:create" in msg and "tether.schedulers.local.scheduler:create_scheduler" in msg


def test_plugin_added(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [EntryPoint("mysched", "my.pkg:create", reg.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(reg, "entry_points", lambda group: fake)
    assert "mysched" in reg.get_scheduler_factories()
