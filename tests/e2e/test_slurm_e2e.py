"""The ``slurm`` scheduler against a real Slurm cluster (munged, slurmctld, two slurmd nodes).

The cluster (``tests/e2e/infra/slurm.py``) has no accounting: status comes from ``squeue
--json``, the path these tests cover (the sacct path is covered by unit tests on sacct text).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.runner import Runner
from tether.schedulers.api import JOB_KEY, DescribeAppResponse
from tether.schedulers.slurm.scheduler import SlurmScheduler, SlurmSubmitError, create_scheduler
from tether.specs import AppDef, AppState, Resource, RetryPolicy, Role, macros

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE_S = 120.0


@pytest.fixture
def sched(slurm_cluster: SlurmCluster) -> Iterator[SlurmScheduler]:
    s = create_scheduler("e2e", slurm_conf=str(slurm_cluster.conf))
    yield s
    s.close()


@pytest.fixture
def cfg(tmp_path: Path) -> dict[str, Any]:
    return {"job_dir": str(tmp_path / "jobs")}


def sh(name: str, script: str, n: int = 1, **kw: Any) -> Role:
    return Role(name, entrypoint="bash", args=["-c", script], num_replicas=n, **kw)


def wait_for(
    sched: SlurmScheduler, app_id: str, states: set[AppState], timeout: float = DEADLINE_S
) -> DescribeAppResponse:
    deadline = time.monotonic() + timeout
    while True:
        desc = sched.describe(app_id)
        assert desc is not None, f"slurm forgot job {app_id}"
        if desc.state in states:
            return desc
        assert time.monotonic() < deadline, f"job {app_id} still {desc.state}: {desc.msg}"
        time.sleep(0.3)


def done(sched: SlurmScheduler, app_id: str) -> DescribeAppResponse:
    return wait_for(sched, app_id, {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


def logs(sched: SlurmScheduler, app_id: str, role: str, k: int = 0) -> list[str]:
    return list(sched.log_iter(app_id, role, k))


def test_succeeded_and_failed_with_reason(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    ok = sched.submit(AppDef("ok", roles=[sh("main", "echo hello from $TETHER_ROLE_NAME")]), cfg)
    bad = sched.submit(AppDef("bad", roles=[sh("main", "echo failing >&2; exit 3")]), cfg)
    d_ok, d_bad = done(sched, ok), done(sched, bad)
    assert d_ok.state == AppState.SUCCEEDED, d_ok.msg
    assert logs(sched, ok, "main") == ["hello from main\n"]
    assert d_bad.state == AppState.FAILED
    assert "NonZeroExitCode" in d_bad.msg and "exit code 3" in d_bad.msg
    assert d_bad.roles_statuses[0].replicas[0].exit_code == 3
    assert logs(sched, bad, "main") == ["failing\n"]  # stderr goes to the replica's log too


def test_two_replicas_get_rank_world_size_and_master_address(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    script = (
        'echo "rank=$TETHER_REPLICA_ID world=$TETHER_NUM_REPLICAS master=$TETHER_RANK0_HOST '
        'node=$SLURMD_NODENAME arg=$1"'
    )
    role = Role("trainer", entrypoint="bash", args=["-c", script, "-", macros.replica_id + "@" +
                macros.app_id], num_replicas=2)  # fmt: skip
    app_id = sched.submit(AppDef("ddp", roles=[role]), cfg)
    assert done(sched, app_id).state == AppState.SUCCEEDED
    got = [logs(sched, app_id, "trainer", k) for k in (0, 1)]
    assert got == [
        [f"rank=0 world=2 master=127.0.0.1 node=n1 arg=0@{app_id}\n"],
        [f"rank=1 world=2 master=127.0.0.1 node=n2 arg=1@{app_id}\n"],
    ]  # one replica per node (the default), the master is node n1's address


def test_heterogeneous_two_role_job(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    script = 'echo "$TETHER_ROLE_NAME $TETHER_REPLICA_ID/$TETHER_NUM_REPLICAS $TETHER_RANK0_HOST"'
    app = AppDef("het", roles=[sh("trainer", script), sh("ps", script)])
    app_id = sched.submit(app, cfg)
    desc = done(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert [r.role for r in desc.roles_statuses] == ["trainer", "ps"]
    assert logs(sched, app_id, "trainer") == ["trainer 0/1 127.0.0.1\n"]
    assert logs(sched, app_id, "ps") == ["ps 0/1 127.0.0.1\n"]
    [listed] = [a for a in sched.list() if a.app_id == app_id]  # one app, not two components
    assert listed.state == AppState.SUCCEEDED and listed.name == "het"


def test_heterogeneous_failure_stops_the_other_role(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    app = AppDef("hetfail", roles=[sh("server", "echo up; exec sleep 600"), sh("client", "exit 5")])
    app_id = sched.submit(app, cfg)
    desc = done(sched, app_id)
    assert desc.state == AppState.FAILED and "exit code 5" in desc.msg
    assert "exit codes by role: server=143 (stopped), client=5" in desc.msg, desc.msg


def _procs_with(cmdline: bytes) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "cmdline").read_bytes() == cmdline:
                    pids.append(int(p.name))
            except OSError:
                continue
    return pids


def test_cancel_reaches_every_task_and_is_idempotent(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    secs = str(random.randint(100000, 999999))
    app_id = sched.submit(
        AppDef("long", roles=[sh("w", f"echo started; exec sleep {secs}", 2)]), cfg
    )
    wait_for(sched, app_id, {AppState.RUNNING})
    deadline = time.monotonic() + DEADLINE_S
    cmd = f"sleep\0{secs}\0".encode()
    while len(_procs_with(cmd)) < 2:  # both tasks (one per node) are sleeping
        assert time.monotonic() < deadline, "the tasks did not start"
        time.sleep(0.2)
    sched.cancel(app_id)
    assert done(sched, app_id).state == AppState.CANCELLED
    while _procs_with(cmd):
        assert time.monotonic() < deadline, "cancelled tasks still run"
        time.sleep(0.2)
    sched.cancel(app_id)  # idempotent: a cancelled job is left alone
    sched.cancel("999999")  # an unknown job too
    assert sched.describe(app_id).state == AppState.CANCELLED  # type: ignore[union-attr]


def test_cancel_while_pending(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    app_id = sched.submit(
        AppDef("held", roles=[sh("w", "true")]), {**cfg, "sbatch_args": ["--hold"]}
    )
    desc = wait_for(sched, app_id, {AppState.PENDING})
    assert "JobHeldUser" in desc.msg
    sched.cancel(app_id)
    assert done(sched, app_id).state == AppState.CANCELLED


def test_resubmission_with_the_same_job_key_reattaches(
    slurm_cluster: SlurmCluster, cfg: dict[str, Any], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    key = f"dag/run-{random.randint(0, 10**9)}/task"
    app = AppDef("keyed", roles=[sh("w", f"while [ ! -e {release} ]; do sleep 0.2; done")])
    with Runner("e2e", scheduler_params={"slurm": {"slurm_conf": str(slurm_cluster.conf)}}) as r:
        first = r.run_or_attach(app, "slurm", cfg, job_key=key)
        second = r.run_or_attach(app, "slurm", cfg, job_key=key)
        assert not first.reattached and second.reattached
        assert second.app_handle == first.app_handle
        release.touch()
        status = r.wait(first.app_handle, wait_interval=0.5, timeout=DEADLINE_S)
        assert status is not None and status.state == AppState.SUCCEEDED
        third = r.run_or_attach(app, "slurm", cfg, job_key=key)  # succeeded: returned as is
        assert third.reattached and third.app_handle == first.app_handle
        assert [a.job_key for a in r.list("slurm") if a.job_key == key] == [key]


def test_logs_per_replica_and_tail(
    sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    release = tmp_path / "go"
    script = (
        f'echo "first $TETHER_REPLICA_ID"; while [ ! -e {release} ]; do sleep 0.2; done; '
        'echo "second $TETHER_REPLICA_ID"'
    )
    app_id = sched.submit(AppDef("tail", roles=[sh("w", script, 2)]), cfg)
    seen = []
    for line in sched.log_iter(app_id, "w", 1, should_tail=True):
        seen.append(line)
        if line == "first 1\n":
            release.touch()
    assert seen == ["first 1\n", "second 1\n"]
    assert done(sched, app_id).state == AppState.SUCCEEDED
    assert logs(sched, app_id, "w", 0) == ["first 0\n", "second 0\n"]
    assert list(sched.log_iter(app_id, "w", 0, regex="sec")) == ["second 0\n"]
    with pytest.raises(ValueError, match=r"has replicas 0\.\.1, not 2"):
        sched.log_iter(app_id, "w", 2)
    with pytest.raises(ValueError, match="no role 'x'"):
        sched.log_iter(app_id, "x", 0)
    log_file = Path(cfg["job_dir"]) / f"tail-{app_id}" / "w-1.out"
    assert log_file.exists()
    sched.delete(app_id)  # removes the job's logs and script
    assert not log_file.parent.exists()


def test_replica_retries(sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    script = f"if [ -e {marker} ]; then echo ok; else touch {marker}; echo boom; exit 1; fi"
    role = sh("w", script, max_retries=1, retry_policy=RetryPolicy.REPLICA)
    app_id = sched.submit(AppDef("rr", roles=[role]), cfg)
    assert done(sched, app_id).state == AppState.SUCCEEDED
    assert logs(sched, app_id, "w") == [
        "boom\n", "tether: replica exited with 1; restart 1 of 1\n", "ok\n",
    ]  # fmt: skip


def test_application_retries_restart_every_role(
    sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    """A failed role stops the other; both start again in the same allocation, counted."""
    marker, ok = tmp_path / "failed-once", tmp_path / "ok"
    flaky = (f"if [ -e {marker} ]; then echo second; touch {ok}; "
             f"else touch {marker}; echo first; exit 3; fi")
    server = f"echo up; while [ ! -e {ok} ]; do sleep 0.2; done"
    app = AppDef("appretry", roles=[
        sh("flaky", flaky, max_retries=1), sh("server", server, max_retries=1),
    ])  # fmt: skip
    app_id = sched.submit(app, cfg)
    desc = done(sched, app_id)
    assert desc.state == AppState.SUCCEEDED and desc.num_restarts == 1, desc
    assert logs(sched, app_id, "flaky") == ["first\n", "second\n"]
    assert logs(sched, app_id, "server").count("up\n") == 2  # stopped, then started again


@pytest.mark.slow
def test_requeue_after_preemption_counts_slurms_restart(
    sched: SlurmScheduler, slurm_cluster: SlurmCluster, cfg: dict[str, Any], tmp_path: Path
) -> None:
    """requeue=True: Slurm requeues the job (here an admin's `scontrol requeue`, as for a
    preemption); it runs again once its credentials expired (cred_expire=30 on the test
    cluster) and the main scheduler's next pass, and num_restarts is Slurm's count."""
    go = tmp_path / "go"
    script = f'echo "attempt ${{SLURM_RESTART_COUNT:-0}}"; while [ ! -e {go} ]; do sleep 0.2; done'
    app_id = sched.submit(AppDef("requeue", roles=[sh("w", script)]), {**cfg, "requeue": True})
    wait_for(sched, app_id, {AppState.RUNNING})
    slurm_cluster.run("scontrol", "requeue", app_id)
    go.touch()
    desc = wait_for(sched, app_id, {AppState.SUCCEEDED, AppState.FAILED}, timeout=280)
    assert desc.state == AppState.SUCCEEDED and desc.num_restarts == 1, desc
    assert logs(sched, app_id, "w")[-1] == "attempt 1\n"


def test_out_of_memory_is_failed_with_the_reason(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    """The test cluster kills steps over their memory (JobAcctGatherParams=OverMemoryKill)."""
    grow = "python3 -c 'import time; a = bytearray(400 << 20); time.sleep(30)'"
    role = sh("hog", grow, resource=Resource(cpu=1, gpu=0, memMB=100))
    app_id = sched.submit(AppDef("oom", roles=[role]), cfg)
    desc = done(sched, app_id)
    assert desc.state == AppState.FAILED
    assert "out of memory" in desc.msg and "exceeded job memory limit" in desc.msg.lower()


@pytest.mark.slow
def test_time_limit_is_failed_with_the_reason(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    """Slurm's smallest time limit is a minute; it enforces it within about 30 s more."""
    app_id = sched.submit(AppDef("slow", roles=[sh("w", "exec sleep 600")]), {**cfg, "time": "1"})
    desc = wait_for(sched, app_id, {AppState.FAILED, AppState.SUCCEEDED}, timeout=200)
    assert desc.state == AppState.FAILED and "TIMEOUT" in desc.msg and "time limit" in desc.msg


def test_bad_partition_is_slurms_reason_and_leaves_no_job(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    before = {a.app_id for a in sched.list()}
    with pytest.raises(SlurmSubmitError, match=r"(?i)invalid partition"):
        sched.submit(AppDef("nopart", roles=[sh("w", "true")]), {**cfg, "partition": "nope"})
    # no job was added (not equality: slurmctld purges the finished jobs of earlier tests
    # from the listing MinJobAge after their end, at any moment)
    assert {a.app_id for a in sched.list()} <= before


def test_gpu_request_on_a_cluster_without_gpus_names_the_role(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    """The nodes have no GPUs (GresTypes=gpu, no node Gres): Slurm's reason, the role named."""
    role = sh("trainer", "true", resource=Resource(cpu=1, gpu=1, memMB=100))
    app = AppDef("gpunodes", roles=[sh("cpu-role", "true"), role])
    with pytest.raises(SlurmSubmitError) as e:
        sched.submit(app, cfg)
    msg = str(e.value)
    assert "Requested node configuration is not available" in msg, msg  # Slurm's own words
    assert "GPUs asked for by ['trainer']" in msg and "role 'trainer': 1 replica(s)" in msg
    # Slurm refuses the component but keeps the records of the heterogeneous job it began
    # (the refused component FAILED, the rest CANCELLED): nothing of it runs or waits
    left = [a for a in sched.list() if a.name == "gpunodes"]
    assert all(a.state in (AppState.CANCELLED, AppState.FAILED) for a in left), left


def test_job_key_recorded_in_the_comment(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    key = f"flow run {os.getpid()}; [x]"
    app = AppDef("k", roles=[sh("w", "true")], metadata={JOB_KEY: key})
    app_id = sched.submit(app, {**cfg, "comment": "mine"})
    assert [a.app_id for a in sched.find_jobs(key)] == [app_id]
    assert done(sched, app_id).job_key == key


TRAIN = """\
import os

import torch
import torch.distributed as dist

from tether.runtime import process_group

with process_group():
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    print(f"RESULT rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():g} "
          f"node={os.environ['SLURMD_NODENAME']}", flush=True)
"""


def test_cli_ddp_two_nodes_gloo(
    slurm_cluster: SlurmCluster, sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    """`tether run -s slurm dist.ddp -j 2x1`: a real torch.distributed job across both nodes."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    from tests.e2e.infra.ports import free_ports

    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    key = f"ddp-{random.randint(0, 10**9)}"
    env = {**slurm_cluster.env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    argv = [
        sys.executable, "-c", "import sys; from tether.cli.main import main; main(sys.argv[1:])",
        "run", "-s", "slurm", "-cfg", f"job_dir={cfg['job_dir']}", "--wait", "--job_key", key,
        "dist.ddp", "-j", "2x1", "--cpu", "1", "--memMB", "1536",
        "--rdzv_port", str(free_ports(1)[0]), "--env", f"PATH={path}", "--script", str(script),
    ]  # fmt: skip
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    [job] = sched.find_jobs(key)
    replicas = [logs(sched, job.app_id, "train", k) for k in (0, 1)]
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}\n{replicas}"
    results = sorted(
        line.split("RESULT ", 1)[1].strip() for rep in replicas for line in rep if "RESULT " in line
    )
    # c10d rendezvous assigns ranks in arrival order: any rank may land on either node
    assert [r.split(" node=")[0] for r in results] == [
        "rank=0 world=2 sum=3", "rank=1 world=2 sum=3",
    ]  # fmt: skip
    assert sorted(r.split(" node=")[1] for r in results) == ["n1", "n2"]


def test_dir_workspace_is_copied_and_the_job_runs_in_it(
    slurm_cluster: SlurmCluster, cfg: dict[str, Any], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.sh").write_text(
        'echo "from the workspace in $(basename "$PWD")"; cat data.txt\n'
    )
    (project / "data.txt").write_text("payload\n")
    (project / "secret.key").write_text("not shipped\n")
    (project / ".tetherignore").write_text("*.key\n")
    app = AppDef("ws", roles=[Role("w", entrypoint="bash", args=["main.sh"])])
    with Runner("e2e", scheduler_params={"slurm": {"slurm_conf": str(slurm_cluster.conf)}}) as r:
        handle = r.run(app, "slurm", cfg, workspace=str(project))
        status = r.wait(handle, wait_interval=0.5, timeout=DEADLINE_S)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        lines = list(r.log_lines(handle, "w", 0))
    [copy] = list((Path(cfg["job_dir"]) / "workspaces").iterdir())
    assert lines == [f"from the workspace in {copy.name}\n", "payload\n"]
    assert not (copy / "secret.key").exists()  # .tetherignore honoured


def test_stdout_and_stderr_streams(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    from tether.schedulers.api import Stream

    app = AppDef("streams", roles=[sh("w", "echo out1; echo err1 >&2")])
    plain = sched.submit(app, cfg)
    app_id = sched.submit(app, {**cfg, "split_streams": True})
    assert done(sched, app_id).state == AppState.SUCCEEDED
    assert done(sched, plain).state == AppState.SUCCEEDED
    with pytest.raises(ValueError, match="split_streams=True"):
        sched.log_iter(plain, "w", 0, streams=Stream.STDERR)
    assert list(sched.log_iter(app_id, "w", 0, streams=Stream.STDOUT)) == ["out1\n"]
    assert list(sched.log_iter(app_id, "w", 0, streams=Stream.STDERR)) == ["err1\n"]
    assert sorted(sched.log_iter(app_id, "w", 0)) == ["err1\n", "out1\n"]  # combined
