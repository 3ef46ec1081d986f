"""``ray`` submissions rendered offline: golden files, bundles, options and the driver's log
prefixes (no Ray cluster; the end-to-end tests are tests/e2e/test_ray_e2e.py).

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.capabilities import UnsupportedFeatureError
from tether.schedulers.ray import driver
from tether.schedulers.ray.options import RayOpts
from tether.schedulers.ray.render import (
    DRIVER_PLACEHOLDER,
    RayRenderError,
    bundle,
    format_request,
    render,
)
from tether.schedulers.ray.scheduler import RayScheduler, resolve_address, write_driver_package
from tether.specs import AppDef, Resource, Role, SecretRef
from tether.workspace.api import Workspace

GOLDEN = Path(__file__).parent / "golden" / "ray"
REGEN = os.environ.get("TETHER_REGEN_GOLDEN", "").lower() in ("1", "true", "yes")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return
    assert path.exists(), f"{path} is missing: run with TETHER_REGEN_GOLDEN=1 to create it"
    assert text + "\n" == path.read_text(), (
        f"{path.name} differs from the rendered request "
        "(if the change is intended, regenerate with TETHER_REGEN_GOLDEN=1)"
    )


def two_roles() -> AppDef:
    return AppDef(
        "train",
        [
            Role("trainer", entrypoint="python", args=["-m", "train", "--id", "${replica_id}"],
                 num_replicas=2, resource=Resource(cpu=2, gpu=1, memMB=1024),
                 env={"LR": "0.1", "WANDB_API_KEY": "sekrit"}),
            Role("ps", entrypoint="python", args=["-m", "ps", "--app", "${app_id}"]),
        ],
        metadata={JOB_KEY: "dag.run.task"},
    )


def test_golden_two_roles_with_options(tmp_path: Path) -> None:
    opts = RayOpts(placement_strategy="STRICT_SPREAD", pip=["torch==2.3.0"],
                   env={"NCCL_DEBUG": "INFO"}, python="/opt/venv/bin/python",
                   placement_timeout=60, working_dir="/srv/project")
    text = format_request(render(two_roles(), opts, "train-abc12345", "sess"))
    assert "sekrit" not in text
    check_golden("two_roles", text)


def test_replica_plan_carries_materialized_env_and_identity() -> None:
    req = render(two_roles(), RayOpts(), "train-abc12345", "sess")
    reps = req.plan["replicas"]
    assert [(r["role"], r["replica_id"]) for r in reps] == [
        ("trainer", 0), ("trainer", 1), ("ps", 0)]
    assert reps[1]["argv"] == ["python", "-m", "train", "--id", "1"]
    assert reps[1]["env"]["TETHER_NUM_REPLICAS"] == "2"
    assert reps[2]["argv"][-1] == "train-abc12345"
    assert req.metadata[JOB_KEY] == "dag.run.task"
    assert json.loads(req.metadata["tether.roles"]) == {"trainer": 2, "ps": 1}
    kwargs = req.submit_kwargs("/tmp/pkg")
    assert kwargs["runtime_env"]["py_modules"] == ["/tmp/pkg"]
    plan = json.loads(kwargs["runtime_env"]["env_vars"][driver.PLAN_ENV])
    assert plan["replicas"][0]["env"]["WANDB_API_KEY"] == "sekrit"  # the job needs it
    assert req.runtime_env["py_modules"] == [DRIVER_PLACEHOLDER]


def test_replicas_beyond_min_replicas_are_optional() -> None:
    role = Role("r", entrypoint="p", num_replicas=4, min_replicas=2)
    req = render(AppDef("a", [role]), RayOpts(elastic_wait=3), "a-1", "s")
    assert [r["optional"] for r in req.plan["replicas"]] == [False, False, True, True]
    assert req.plan["elastic_wait"] == 3


def test_bundles_default_to_one_cpu() -> None:
    assert bundle(Role("r", entrypoint="x")) == {"CPU": 1.0}
    assert bundle(Role("r", entrypoint="x", resource=Resource(cpu=0.5, gpu=2, memMB=10))) == {
        "CPU": 0.5, "GPU": 2.0, "memory": 10 * 1024 * 1024.0}


def test_workspace_becomes_working_dir(tmp_path: Path) -> None:
    role = Role("r", entrypoint="python", workspace=Workspace({str(tmp_path): ""}))
    req = render(AppDef("a", [role]), RayOpts(), "a-1", "s")
    assert req.runtime_env["working_dir"] == str(tmp_path)


def test_roles_with_different_workspaces_are_rejected(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    app = AppDef("x", [Role("one", entrypoint="p", workspace=Workspace({str(a): ""})),
                       Role("two", entrypoint="p", workspace=Workspace({str(b): ""}))])
    with pytest.raises(RayRenderError, match=r"workspaces differ: one=.*two="):
        RayScheduler("s").submit_dryrun(app, {})


def test_bad_options_name_field_value_and_close_match() -> None:
    app = AppDef("x", [Role("r", entrypoint="p")])
    with pytest.raises(RayRenderError, match=r"placement_strategy='STRICT_SPRED'.*STRICT_SPREAD\?"):
        RayScheduler("s").submit_dryrun(app, {"placement_strategy": "STRICT_SPRED"})
    with pytest.raises(RayRenderError, match="placement_timeout=-1"):
        RayScheduler("s").submit_dryrun(app, {"placement_timeout": -1.0})


def test_unsupported_features_rejected_at_dryrun() -> None:
    role = Role("r", entrypoint="p", max_retries=2, secrets={"TOKEN": SecretRef("s", "k")})
    with pytest.raises(UnsupportedFeatureError) as e:
        RayScheduler("s").submit_dryrun(AppDef("x", [role]), {})
    assert "retry_policy" in str(e.value) and "secrets" in str(e.value)


def test_dryrun_is_offline_and_does_not_import_ray() -> None:
    code = (
        "import sys\n"
        "from tether.schedulers import get_scheduler_factory\n"
        "from tether.specs import AppDef, Role\n"
        "s = get_scheduler_factory('ray')('s', address='http://127.0.0.1:1')\n"
        "info = s.submit_dryrun(AppDef('a', [Role('r', entrypoint='echo')]), {})\n"
        "assert 'tether_ray_driver' in str(info)\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_registered_and_in_runopts() -> None:
    sched = get_scheduler_factory("ray")("s")
    assert isinstance(sched, RayScheduler)
    assert "placement_strategy" in sched.run_opts()


def test_address_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_address() == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # a GCS address is not the Jobs API
    assert resolve_address() == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://h:1")
    assert resolve_address() == "http://h:1"
    assert resolve_address("http://x:2") == "http://x:2"


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("\x1b[36m(run_replica pid=5802)\x1b[0m [w/1] hello", ("w", 1, "hello")),
        ("(run_replica pid=1, ip=10.0.0.2) [trainer/0] [x/3] y", ("trainer", 0, "[x/3] y")),
        ("[ps/0] ", ("ps", 0, "")),
        ("tether: reserving 2 bundle(s)", None),
        ("2026-11-25 INFO worker.py -- Connected", None),
    ],
)
def test_driver_log_prefix_is_separable(line: str, want: object) -> None:
    assert driver.split_replica_line(line) == want


def test_driver_imports_only_stdlib_and_ray(tmp_path: Path) -> None:
    pkg = Path(write_driver_package(str(tmp_path)))
    tree = ast.parse((pkg / "driver.py").read_text())
    mods = {n.module.split(".")[0] for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module}
    mods |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    assert mods - {"ray", "__future__"} <= set(sys.stdlib_module_names)


def test_driver_runs_a_replica_with_its_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    rc = driver.run_replica("w", 3, [sys.executable, "-c", "print('a'); print('b')"], {}, None)
    assert rc == 0
    assert capsys.readouterr().out == "[w/3] a\n[w/3] b\n"
    assert driver.run_replica("w", 0, ["/no/such/program"], {}, None) == 127
