"""``ray`` submissions rendered offline: golden files, bundles, options and the driver's log
prefixes (no Ray cluster; the end-to-end tests are tests/e2e/test_ray_e2e.py).

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.golden import GoldenDir
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

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "ray", suffix=".json", end="\n")


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
    GOLDEN.check("two_roles", text)


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
    out = capsys.readouterr().out
    assert out == "[w/3] a\n[w/3] b\ntether: end of [w/3]\n"
    # the end mark (which the driver waits for) is no line of the replica
    assert driver.split_replica_line("(run_replica pid=1) tether: end of [w/3]") is None
    assert driver.run_replica("w", 0, ["/no/such/program"], {}, None) == 127


def test_driver_reads_the_failed_replica_from_the_job_message() -> None:
    msg = ("Job entrypoint command failed with exit code 1, last available logs:\n"
           "(run_replica pid=7) [main/0] about to fail\n"
           "tether: role 'main' replica 0 exited with code 3\n")
    assert driver.failed_replica(msg) == ("main", 0, 3)
    assert driver.failed_replica("Job entrypoint command failed with exit code -9.") is None


def test_driver_stops_a_cancelled_replica_with_sigterm(tmp_path: Path) -> None:
    """Ray cancels a task by raising KeyboardInterrupt in its main thread (between
    bytecodes): ``run_replica`` must notice while its program sleeps and give it SIGTERM."""
    import _thread
    import threading

    ready, termed = tmp_path / "ready", tmp_path / "termed"
    code = ("import signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (open({str(termed)!r}, 'w').close(), "
            "sys.exit(0)))\n"
            f"open({str(ready)!r}, 'w').close()\n"
            "time.sleep(600)\n")

    def cancel_when_ready() -> None:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _thread.interrupt_main()  # what ray.cancel(force=False) does in the task's worker

    # interrupt_main() does nothing while SIGINT is ignored, which is how a suite started in
    # the background (nohup, `&`) inherits it; a Ray worker has Python's handler installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    canceller = threading.Thread(target=cancel_when_ready)
    canceller.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            driver.run_replica("m", 0, [sys.executable, "-c", code], {}, None)
    finally:
        canceller.join()
        signal.signal(signal.SIGINT, previous)
    assert termed.exists(), "the replica did not get SIGTERM"


# ---- overlays ----------------------------------------------------------------------------
def overlaid_app() -> AppDef:
    from tether.specs.overlays import PUT, set_overlay

    app = two_roles()
    trainer = app.roles[0]
    set_overlay(trainer, "ray", "Replica", {
        "options": {"resources": {"trn": 1}, "accelerator_type": "A100"},
        "bundle": {"trn": 1.0},
        PUT("cwd"): "/scratch",
    })  # fmt: skip
    set_overlay(app, "ray", "JobSubmission", {
        "runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN"}, "py_modules": ["s3://b/extra.zip"]},
        "metadata": {"team": "ml"},
        "entrypoint_resources": {"head": 0.1},
        "entrypoint_num_cpus": 0.5,
    })  # fmt: skip
    return app


def test_overlays_merge_last_golden_and_dryrun_shows_them() -> None:
    opts = RayOpts(env={"NCCL_DEBUG": "INFO"}, python="/opt/venv/bin/python")
    req = render(overlaid_app(), opts, "train-abc12345", "sess")
    GOLDEN.check("overlays", format_request(req))
    trainer = [r for r in req.plan["replicas"] if r["role"] == "trainer"]
    assert all(r["options"]["accelerator_type"] == "A100" and r["cwd"] == "/scratch"
               and r["bundle"] == {"CPU": 2.0, "GPU": 1.0, "memory": 1024 * 1024 * 1024.0,
                                   "trn": 1.0} for r in trainer)
    assert "options" not in req.plan["replicas"][2]  # the other role is untouched
    assert req.runtime_env["env_vars"]["NCCL_DEBUG"] == "WARN"  # the overlay wins
    assert req.runtime_env["py_modules"] == [DRIVER_PLACEHOLDER, "s3://b/extra.zip"]
    kwargs = req.submit_kwargs("/tmp/pkg")
    assert kwargs["entrypoint_resources"] == {"head": 0.1}
    assert kwargs["entrypoint_num_cpus"] == 0.5 and kwargs["metadata"]["team"] == "ml"
    assert kwargs["metadata"]["tether.managed_by"] == "tether"
    info = RayScheduler("s").submit_dryrun(overlaid_app(), {"python": "/opt/venv/bin/python"})
    assert '"accelerator_type": "A100"' in str(info) and '"entrypoint_resources"' in str(info)


def test_overlays_cannot_change_the_identity() -> None:
    from tether.specs.overlays import set_overlay

    app = two_roles()
    set_overlay(app.roles[1], "ray", "Replica", {"role": "other"})
    with pytest.raises(RayRenderError, match="role 'ps': ray Replica overlay may not change role"):
        RayScheduler("s").submit_dryrun(app, {})
    app = two_roles()
    set_overlay(app, "ray", "JobSubmission", {"submission_id": "mine"})
    with pytest.raises(RayRenderError, match="may not change submission_id"):
        RayScheduler("s").submit_dryrun(app, {})


def test_driver_passes_overlay_task_options_to_ray() -> None:
    calls: list[dict[str, object]] = []

    class Task:
        def options(self, **kw: object) -> Task:
            calls.append(kw)
            return self

        def remote(self, *a: object) -> str:
            return "ref"

    class FakeRay:  # only what _start_replica touches besides the real strategy class
        pass

    pytest.importorskip("ray.util.scheduling_strategies")
    req = render(overlaid_app(), RayOpts(), "a-1", "s")
    refs: dict[object, dict[str, object]] = {}
    driver._start_replica(FakeRay(), Task(), req.plan["replicas"][0], None, 0, "h",
                          {"trainer": 2}, refs)
    assert calls[0]["resources"] == {"trn": 1} and calls[0]["accelerator_type"] == "A100"
    assert calls[0]["num_cpus"] == 2.0 and calls[0]["max_retries"] == 0
