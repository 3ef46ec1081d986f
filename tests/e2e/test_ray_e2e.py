"""The ``ray`` scheduler against a real local Ray head (``tests/e2e/infra/ray.py``).

Every test submits real Ray jobs through the Jobs API; the replicas are real processes that
tether's driver starts as Ray tasks in a placement group.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tether.runner.api import Runner
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.ray.scheduler import RayConnectionError, RayScheduler
from tether.specs import AppDef, AppState, Resource, Role
from tether.specs.status import is_terminal
from tether.workspace.api import Workspace

pytestmark = pytest.mark.e2e

PY = sys.executable
DEADLINE_S = 240.0


def wait_state(sched: RayScheduler, app_id: str, want: set[AppState]) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    desc = None
    while time.monotonic() < deadline:
        desc = sched.describe(app_id)
        assert desc is not None
        if desc.state in want or (is_terminal(desc.state) and not want & {desc.state}):
            return desc
        time.sleep(0.5)
    raise AssertionError(f"{app_id} never reached {want}; last: {desc}")


def terminal(sched: RayScheduler, app_id: str) -> Any:
    return wait_state(sched, app_id, {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


def cpu1() -> Resource:
    return Resource(cpu=1, gpu=0, memMB=0)


@pytest.fixture
def sched(ray_head: Any) -> RayScheduler:
    return RayScheduler("e2e", address=ray_head.address)


def submit(sched: RayScheduler, app: AppDef, **cfg: Any) -> str:
    return sched.submit(app, {"python": PY, **cfg})


def logs(sched: RayScheduler, app_id: str, role: str, k: int = 0) -> list[str]:
    return list(sched.log_iter(app_id, role, k))


def test_success_and_logs(sched: RayScheduler) -> None:
    app = AppDef("hello", [Role("echo", entrypoint=PY, args=["-c", "print('hi from ray')"],
                                resource=cpu1())])
    app_id = submit(sched, app)
    desc = terminal(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert logs(sched, app_id, "echo") == ["hi from ray\n"]
    assert any(a.app_id == app_id and a.name == "hello" for a in sched.list())


def test_failure_names_replica_and_exit_code(sched: RayScheduler) -> None:
    app = AppDef("fails", [Role("bad", entrypoint=PY,
                                args=["-c", "import sys; print('dying'); sys.exit(3)"],
                                resource=cpu1())])
    app_id = submit(sched, app)
    desc = terminal(sched, app_id)
    assert desc.state == AppState.FAILED
    assert "role 'bad' replica 0 exited with code 3" in desc.msg
    assert logs(sched, app_id, "bad") == ["dying\n"]


def test_two_replicas_env_and_logs_per_replica(sched: RayScheduler) -> None:
    script = (
        "import os; print('rank', os.environ['TETHER_REPLICA_ID'], "
        "os.environ['TETHER_NUM_REPLICAS'], os.environ['TETHER_RANK0_HOST'], "
        "os.environ['TETHER_ROLE_NAME'], os.environ['EXTRA'])"
    )
    role = Role("w", entrypoint=PY, args=["-c", script], num_replicas=2, resource=cpu1(),
                env={"EXTRA": "r${replica_id}"})
    app_id = submit(sched, AppDef("ranks", [role]), placement_strategy="SPREAD")
    desc = terminal(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert [len(r.replicas) for r in desc.roles_statuses] == [2]
    assert logs(sched, app_id, "w", 0) == ["rank 0 2 127.0.0.1 w r0\n"]
    assert logs(sched, app_id, "w", 1) == ["rank 1 2 127.0.0.1 w r1\n"]
    with pytest.raises(ValueError, match="no replica w/2"):
        logs(sched, app_id, "w", 2)


def test_elastic_role_starts_with_the_replicas_that_fit(sched: RayScheduler) -> None:
    """The head has 2 CPUs: 3 replicas of 1 CPU with min_replicas=2 start as 2."""
    script = "import os; print('world', os.environ['TETHER_NUM_REPLICAS'])"
    role = Role("e", entrypoint=PY, args=["-c", script], num_replicas=3, min_replicas=2,
                resource=cpu1())
    app_id = submit(sched, AppDef("elastic", [role]), elastic_wait=1.0)
    desc = terminal(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert [logs(sched, app_id, "e", k) for k in range(3)] == [
        ["world 2\n"], ["world 2\n"], []]


def test_torch_distributed_gloo_from_workspace(sched: RayScheduler, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    from tests.e2e.infra.ports import free_port

    (tmp_path / "allreduce.py").write_text(
        "import os\n"
        "import torch, torch.distributed as dist\n"
        "rank = int(os.environ['TETHER_REPLICA_ID'])\n"
        "world = int(os.environ['TETHER_NUM_REPLICAS'])\n"
        "url = f\"tcp://{os.environ['TETHER_RANK0_HOST']}:{os.environ['PORT']}\"\n"
        "dist.init_process_group('gloo', init_method=url, rank=rank, world_size=world)\n"
        "t = torch.tensor([float(rank + 1)])\n"
        "dist.all_reduce(t)\n"
        "print('sum', int(t.item()), flush=True)\n"
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
    )
    role = Role("trainer", entrypoint=PY, args=["allreduce.py"], num_replicas=2,
                resource=cpu1(), env={"PORT": str(free_port())},
                workspace=Workspace({str(tmp_path): ""}))
    app_id = submit(sched, AppDef("ddp", [role]))
    desc = terminal(sched, app_id)
    out = {k: logs(sched, app_id, "trainer", k) for k in (0, 1)}
    assert desc.state == AppState.SUCCEEDED, (desc.msg, out)
    assert out == {0: ["sum 3\n"], 1: ["sum 3\n"]}


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_cancel_stops_the_replica_and_is_idempotent(sched: RayScheduler) -> None:
    script = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(600)"
    app_id = submit(sched, AppDef("long", [Role("s", entrypoint=PY, args=["-c", script],
                                                resource=cpu1())]))
    tail = iter(sched.log_iter(app_id, "s", 0, should_tail=True))
    pid = int(next(tail).split()[1])  # the replica runs (on this host)
    assert pid_alive(pid)
    sched.cancel(app_id)
    desc = terminal(sched, app_id)
    assert desc.state == AppState.CANCELLED
    assert list(tail) == []  # following ends with the job
    deadline = time.monotonic() + 60
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pid_alive(pid), "the replica's process outlived the cancelled job"
    sched.cancel(app_id)  # no-op
    sched.cancel("no-such-job-123")  # no-op
    assert sched.describe("no-such-job-123") is None
    sched.delete(app_id)
    assert sched.describe(app_id) is None


def test_reattach_by_job_key(sched: RayScheduler, ray_head: Any) -> None:
    key = f"dag.task.{uuid.uuid4().hex[:8]}"
    script = "import time; print('once', flush=True); time.sleep(600)"
    app = AppDef("keyed", [Role("s", entrypoint=PY, args=["-c", script], resource=cpu1())],
                 metadata={JOB_KEY: key})
    first = submit(sched, app)
    try:
        wait_state(sched, first, {AppState.RUNNING})
        other = RayScheduler("another-process", address=ray_head.address)
        found = other.find_jobs(key)
        assert [a.app_id for a in found] == [first]
        assert other.describe(first).job_key == key  # type: ignore[union-attr]
        with Runner("another-process", scheduler_factories={"ray": get_scheduler_factory("ray")},
                    scheduler_params={"ray": {"address": ray_head.address}}) as runner:
            outcome = runner.run_or_attach(app, "ray", {"python": PY}, job_key=key)
        assert outcome.reattached and outcome.app_handle.endswith(f"/{first}")
        assert [a.app_id for a in other.find_jobs(key)] == [first]  # not a second job
    finally:
        sched.cancel(first)
    assert terminal(sched, first).state == AppState.CANCELLED


def test_unreachable_head_names_what_to_set() -> None:
    from tests.e2e.infra.ports import free_port

    sched = RayScheduler("e2e", address=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(RayConnectionError, match="TETHER_RAY_ADDRESS"):
        sched.describe("x")


def test_cli_run_log_and_list(ray_head: Any, tmp_path: Path) -> None:
    """``tether run --log -s ray`` streams every replica and exits with the app's result."""
    import os
    import subprocess

    env = {**os.environ, "TETHER_RAY_ADDRESS": ray_head.address,
           "TETHER_STATE_DIR": str(tmp_path / "state"),
           "TETHERCONFIG": str(tmp_path / "none.tetherconfig")}
    (tmp_path / "none.tetherconfig").write_text("")
    cli = [PY, "-m", "tether.cli.main"]
    run = subprocess.run(
        [*cli, "run", "--log", "-s", "ray", "-cfg", f"python={PY}", "utils.echo", "--msg",
         "hi from the cli"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "hi from the cli" in run.stdout
    listed = subprocess.run([*cli, "list", "-s", "ray"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "SUCCEEDED" in listed.stdout
