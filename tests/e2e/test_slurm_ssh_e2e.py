"""The ``slurm`` scheduler over the ``ssh`` transport, against the real cluster.

A private sshd on a loopback port (``tests/e2e/infra/slurm_remote.py``) lets the dedicated
user :data:`~tests.e2e.infra.slurm_remote.SSH_USER` in with a session key; the tests run with
no Slurm client on their PATH (only ``ssh``), so every Slurm command and every file of the job
directory goes through the transport. The job directory is in that user's home.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tests.e2e.infra.slurm_remote import SshServer, ensure_user
from tests.e2e.slurm_remote_checks import (
    outputs_through_the_mount,
    retry_finds_the_job_over_the_cfg_transport,
)
from tether.runner import Runner
from tether.schedulers.api import JOB_KEY, DescribeAppResponse
from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler
from tether.schedulers.slurm.ssh import SshTransport
from tether.schedulers.slurm.transport import ConnectionDropped, SlurmTransportError
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE_S = 120.0


@pytest.fixture
def no_slurm_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH holds only ssh and rsync (and the shell tools tests use): no sbatch, squeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "ssh-keygen", "sh", "rsync"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("sbatch") is None and shutil.which("squeue") is None


@pytest.fixture
def remote(slurm_cluster: SlurmCluster, slurm_sshd: SshServer) -> dict[str, Any]:
    """Scheduler parameters for the ssh transport to the test cluster."""
    return {**slurm_sshd.settings(), "slurm_conf": str(slurm_cluster.conf)}


@pytest.fixture
def sched(remote: dict[str, Any], no_slurm_client: None) -> Iterator[SlurmScheduler]:
    s = create_scheduler("e2e", **remote)
    yield s
    s.close()


@pytest.fixture
def cfg(slurm_sshd: SshServer) -> Iterator[dict[str, Any]]:
    home = Path(ensure_user(slurm_sshd.user).pw_dir)
    job_dir = home / "tether-e2e" / uuid.uuid4().hex[:12]
    yield {"job_dir": str(job_dir)}
    shutil.rmtree(job_dir, ignore_errors=True)


def sh(name: str, script: str, n: int = 1, **kw: Any) -> Role:
    return Role(name, entrypoint="bash", args=["-c", script], num_replicas=n, **kw)


def done(sched: SlurmScheduler, app_id: str, states: set[AppState] | None = None) -> Any:
    want = states or {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        desc: DescribeAppResponse | None = sched.describe(app_id)
        assert desc is not None, f"slurm forgot job {app_id}"
        if desc.state in want:
            return desc
        assert time.monotonic() < deadline, f"job {app_id} still {desc.state}: {desc.msg}"
        time.sleep(0.3)


def accepted(server: SshServer) -> int:
    """How many ssh connections the server has accepted so far (its log)."""
    assert server.dir is not None
    return (server.dir / "sshd.log").read_text().count("Accepted publickey")


def test_submit_describe_logs_list_over_ssh(
    sched: SlurmScheduler, cfg: dict[str, Any], slurm_sshd: SshServer
) -> None:
    # ps fails once the trainer's step has ended (its exit file is written), so the trainer
    # is not stopped by ps's failure
    wait_trainer = 'until [ -s "$TETHER_SLURM_LOGS"/.exit-trainer ]; do sleep 0.1; done; exit 4'
    app = AppDef("het", roles=[sh("trainer", "echo t $TETHER_ROLE_NAME"), sh("ps", wait_trainer)])
    app_id = sched.submit(app, cfg)
    desc = done(sched, app_id)
    assert desc.state == AppState.FAILED and "exit code 4" in desc.msg
    # the exit codes by role are read from the job directory on the login node
    assert "exit codes by role: trainer=0, ps=4" in desc.msg, desc.msg
    assert list(sched.log_iter(app_id, "trainer", 0)) == ["t trainer\n"]
    [listed] = [a for a in sched.list() if a.app_id == app_id]
    assert listed.name == "het" and listed.state == AppState.FAILED
    owner = Path(cfg["job_dir"]).stat().st_uid  # written as the login user, not as us
    assert owner == ensure_user(slurm_sshd.user).pw_uid


def test_one_connection_for_many_calls_and_a_dropped_one_is_replaced(
    sched: SlurmScheduler, cfg: dict[str, Any], slurm_sshd: SshServer
) -> None:
    before = accepted(slurm_sshd)
    app_id = sched.submit(AppDef("many", roles=[sh("w", "echo hi")]), cfg)
    done(sched, app_id)
    for _ in range(5):
        assert sched.describe(app_id) is not None
    assert accepted(slurm_sshd) == before + 1  # every call multiplexed over one connection
    transport = sched.client.transport  # type: ignore[attr-defined]
    assert isinstance(transport, SshTransport)
    subprocess.run([*transport.base_argv(), "-O", "exit", "--", "127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip  # the connection drops
    assert sched.describe(app_id) is not None  # re-established
    assert accepted(slurm_sshd) == before + 2


def test_hostile_names_args_and_env_cross_ssh_quoted(
    sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    pwned = Path("/tmp") / f"tether-pwned-{uuid.uuid4().hex[:8]}"
    evil = f"$(touch {pwned}); `touch {pwned}` ' \" ; touch {pwned} #"
    role = Role("w", entrypoint="printf", args=["%s|%s\\n", evil, "${HOME}"],
                env={"EVIL": evil})  # fmt: skip
    app = AppDef(f"n;touch {pwned}", roles=[role])
    app_id = sched.submit(app, {**cfg, "comment": evil})
    assert done(sched, app_id).state == AppState.SUCCEEDED
    assert list(sched.log_iter(app_id, "w", 0)) == [f"{evil}|${{HOME}}\n"]
    [listed] = [a for a in sched.list() if a.app_id == app_id]
    assert listed.state == AppState.SUCCEEDED
    assert not pwned.exists()


def test_cancel_and_reattach_by_job_key_from_a_new_scheduler(
    remote: dict[str, Any], cfg: dict[str, Any], no_slurm_client: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    key = f"dag/run-{uuid.uuid4().hex[:8]}/task"
    app = AppDef("keyed", roles=[sh("w", "echo up; exec sleep 600")])
    with Runner("e2e", scheduler_params={"slurm": remote}) as r:
        first = r.run_or_attach(app, "slurm", cfg, job_key=key)
    # another process (a later `tether status` in a shell): the transport from TETHER_SLURM_*
    for name, value in remote.items():
        monkeypatch.setenv(f"TETHER_SLURM_{name.upper()}", str(value))
    with Runner("e2e") as r:
        second = r.run_or_attach(app, "slurm", cfg, job_key=key)
        assert second.reattached and second.app_handle == first.app_handle
        r.cancel(first.app_handle)
        status = r.wait(first.app_handle, wait_interval=0.5, timeout=DEADLINE_S)
        assert status is not None and status.state == AppState.CANCELLED


def test_a_retry_finds_the_job_over_the_transport_given_only_in_the_run_options(
    slurm_cluster: SlurmCluster, slurm_sshd: SshServer, cfg: dict[str, Any],
    no_slurm_client: None,
) -> None:  # fmt: skip
    params = {"slurm_conf": str(slurm_cluster.conf)}  # no transport: that is in the options
    retry_finds_the_job_over_the_cfg_transport(params, {**cfg, **slurm_sshd.settings()},
                                               DEADLINE_S)  # fmt: skip


class LostReply(SshTransport):
    """Runs sbatch for real, then loses the reply once (as a connection dropping right
    after the command ran); the one injected fault of these tests, since a real drop cannot
    be timed between sbatch's effect and its answer."""

    dropped = False

    def run(self, argv: Any, input: Any = None, timeout: Any = None, retry: bool = True) -> Any:
        res = super().run(argv, input=input, timeout=timeout, retry=retry)
        if argv and argv[0] == "sbatch" and not LostReply.dropped:
            LostReply.dropped = True
            raise ConnectionDropped("ssh", self.where, "the connection dropped", "retry")
        return res


def test_submit_is_idempotent_on_the_job_key_across_a_dropped_connection(
    sched: SlurmScheduler, cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = sched.client
    lossy = LostReply(client.transport.settings)  # type: ignore[attr-defined]
    monkeypatch.setattr(client, "transport", lossy)
    from tether.schedulers.slurm.files import ShellFiles

    monkeypatch.setattr(client, "files", ShellFiles(lossy))
    key = f"k-{uuid.uuid4().hex[:8]}"
    app = AppDef("once", roles=[sh("w", "echo once")], metadata={JOB_KEY: key})
    app_id = sched.submit(app, cfg)
    assert LostReply.dropped
    assert [a.app_id for a in sched.find_jobs(key)] == [app_id]  # submitted once
    lossy.close()


@pytest.mark.parametrize("fault", ["port", "key", "host_key"])
def test_connection_errors_name_transport_host_and_fix(
    fault: str, remote: dict[str, Any], cfg: dict[str, Any], tmp_path: Path
) -> None:
    params = dict(remote)
    if fault == "port":
        params["port"] = 1  # nothing listens there
        want = "check host and port"
    elif fault == "key":
        other = tmp_path / "other_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                       check=True)  # fmt: skip
        params["identity_file"] = str(other)
        want = "login was refused"
    else:
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        params["known_hosts"] = str(empty)
        want = "host key is unknown"
    sched = create_scheduler("e2e", **params)
    try:
        with pytest.raises(SlurmTransportError) as err:
            sched.submit(AppDef("nope", roles=[sh("w", "true")]), cfg)
    finally:
        sched.close()
    text = str(err.value)
    assert text.startswith("slurm transport ssh to tether-ssh@127.0.0.1:"), text
    assert want in text, text
    assert not Path(cfg["job_dir"]).exists()  # nothing was submitted


def test_close_stops_the_shared_connection(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    sched.list()
    transport = sched.client.transport  # type: ignore[attr-defined]
    path = transport.control_path
    assert os.path.exists(path)
    sched.close()
    assert not os.path.exists(path)


def test_dir_workspace_is_copied_over_ssh_once_per_content(
    sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "data.txt").write_text("from the workspace\n")
    (project / ".tetherignore").write_text("secret.env\n")
    (project / "secret.env").write_text("TOKEN=x\n")
    role = Role("w", entrypoint="bash", args=["-c", "cat pkg/data.txt; ls secret.env 2>&1"])
    first = sched.submit(AppDef("ws", roles=[role]), cfg, workspace=str(project))
    assert done(sched, first).state == AppState.FAILED  # ls of the ignored file fails
    lines = list(sched.log_iter(first, "w", 0))
    assert lines[0] == "from the workspace\n" and "No such file" in lines[1]
    copies = Path(cfg["job_dir"]) / "workspaces"
    [copy] = copies.iterdir()
    os.utime(project / "pkg" / "data.txt", (1, 1))  # same content, other time: not sent again
    second = sched.submit(AppDef("ws", roles=[role]), cfg, workspace=str(project))
    done(sched, second)
    assert list(copies.iterdir()) == [copy]
    (project / "pkg" / "data.txt").write_text("changed\n")
    third = sched.submit(AppDef("ws", roles=[role]), cfg, workspace=str(project))
    done(sched, third)
    assert next(iter(sched.log_iter(third, "w", 0))) == "changed\n"
    assert len(list(copies.iterdir())) == 2


def test_remote_transport_needs_a_job_dir(remote: dict[str, Any]) -> None:
    sched = create_scheduler("e2e", **remote)
    with pytest.raises(ValueError, match="transport=ssh needs the run option job_dir"):
        sched.submit_dryrun(AppDef("x", roles=[sh("w", "true")]), {})


def test_delete_over_ssh_hides_the_job_and_removes_its_files(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    app_id = sched.submit(AppDef("gone", roles=[sh("w", "echo bye")]), cfg)
    done(sched, app_id)
    logs = Path(cfg["job_dir"]) / f"gone-{app_id}"
    assert logs.is_dir()
    sched.delete(app_id)
    assert sched.describe(app_id) is None
    assert app_id not in [a.app_id for a in sched.list()]
    assert not logs.exists() and (Path(cfg["job_dir"]) / f".gone-{app_id}.deleted").exists()


def test_log_tail_survives_a_dropped_connection(
    sched: SlurmScheduler, cfg: dict[str, Any], slurm_sshd: SshServer
) -> None:
    release = Path(cfg["job_dir"]) / "release"
    script = f"echo first; while [ ! -e {release} ]; do sleep 0.2; done; echo second"
    app_id = sched.submit(AppDef("tail", roles=[sh("w", script)]), cfg)
    before = accepted(slurm_sshd)
    transport = sched.client.transport  # type: ignore[attr-defined]
    seen = []
    for line in sched.log_iter(app_id, "w", 0, should_tail=True):
        seen.append(line)
        if line == "first\n":  # drop the connection mid-log, then let the job go on
            subprocess.run([*transport.base_argv(), "-O", "exit", "--", "127.0.0.1"],
                           check=True, capture_output=True)  # fmt: skip
            release.touch()
    assert seen == ["first\n", "second\n"]
    assert accepted(slurm_sshd) == before + 1  # one new connection replaced the dropped one


def test_cli_runs_over_ssh_and_a_later_call_finds_the_job_by_environment(
    remote: dict[str, Any], cfg: dict[str, Any], no_slurm_client: None
) -> None:
    import sys

    env = {**os.environ, **{f"TETHER_SLURM_{k.upper()}": str(v) for k, v in remote.items()}}
    cli = [sys.executable, "-m", "tether.cli.main"]
    run = subprocess.run(
        [*cli, "run", "-s", "slurm", "-cfg", f"job_dir={cfg['job_dir']}", "utils.echo",
         "--msg", "over ssh"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    handle = next(w for w in run.stdout.split() if w.startswith("slurm://"))
    deadline = time.monotonic() + DEADLINE_S
    while True:  # each call a new process: the transport comes from TETHER_SLURM_*
        status = subprocess.run([*cli, "status", handle], env=env, capture_output=True,
                                text=True, timeout=120)  # fmt: skip
        assert status.returncode == 0, status.stderr
        if "SUCCEEDED" in status.stdout:
            break
        assert time.monotonic() < deadline, status.stdout
        time.sleep(0.5)
    log = subprocess.run([*cli, "log", handle], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert "over ssh" in log.stdout, log.stderr


def test_list_and_find_jobs_show_only_the_login_users_jobs(
    slurm_cluster: SlurmCluster, remote: dict[str, Any], cfg: dict[str, Any], tmp_path: Path
) -> None:
    key = f"shared-{uuid.uuid4().hex[:8]}"
    app = AppDef("mine", roles=[sh("w", "true")], metadata={JOB_KEY: key})
    local = create_scheduler("e2e", slurm_conf=str(slurm_cluster.conf))  # this user's job
    theirs = local.submit(app, {"job_dir": str(tmp_path / "jobs")})
    over_ssh = create_scheduler("e2e", **remote)
    try:
        assert over_ssh.find_jobs(key) == []  # squeue --json lists every user's jobs
        ours = over_ssh.submit(app, cfg)
        assert [a.app_id for a in over_ssh.find_jobs(key)] == [ours]
        assert theirs not in [a.app_id for a in over_ssh.list()]
    finally:
        over_ssh.close()


def test_watch_hub_follows_jobs_over_ssh_with_one_squeue_per_read(
    sched: SlurmScheduler, cfg: dict[str, Any], slurm_sshd: SshServer
) -> None:
    from tether.schedulers.slurm.watch import SlurmReader
    from tether.schedulers.watch import Subscription, WatchHub

    ids = [sched.submit(AppDef("w", roles=[sh("w", f"exit {i}")]), cfg) for i in range(3)]
    before = accepted(slurm_sshd)
    hub = WatchHub()
    with Subscription(hub) as sub:
        for app_id in ids:
            sub.follow(sched, app_id)
        finals = {e.app_id: e.state for e in sub.events(timeout=120) if e.final}
        view = next(iter(hub._views.values()))
        reader = view.driver._reader
        assert isinstance(reader, SlurmReader)
        per_read = reader.commands / max(view.driver.rounds, 1)
    hub.close()
    assert finals == {ids[0]: AppState.SUCCEEDED, ids[1]: AppState.FAILED,
                      ids[2]: AppState.FAILED}  # fmt: skip
    assert per_read <= 2  # one squeue (and a sacct), not one per job
    assert accepted(slurm_sshd) == before  # over the scheduler's one connection


def test_outputs_root_under_the_mount_reaches_the_job_and_comes_back(
    remote: dict[str, Any], no_slurm_client: None, cfg: dict[str, Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    outputs_through_the_mount(remote, cfg, tmp_path, monkeypatch)


def test_describe_of_a_job_seen_before_is_one_round_trip(
    sched: SlurmScheduler, cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """squeue and the look at the job's files (delete's marker, restart counts) travel as one
    command once the job's files are known: the status call's cost over ssh."""
    app_id = sched.submit(AppDef("trip", roles=[sh("w", "exec sleep 120")]), cfg)
    done(sched, app_id, {AppState.RUNNING})  # learns where the job's files are
    transport = sched.client.transport  # type: ignore[attr-defined]
    real = transport.run
    commands: list[str] = []

    def counted(argv: Any, *args: Any, **kw: Any) -> Any:
        commands.append(" ".join(argv[:1]))
        return real(argv, *args, **kw)

    monkeypatch.setattr(transport, "run", counted)
    for _ in range(3):
        desc = sched.describe(app_id)
        assert desc is not None and desc.state == AppState.RUNNING
    assert commands == ["sh", "sh", "sh"]
    sched.delete(app_id)
    commands.clear()
    assert sched.describe(app_id) is None  # the marker is seen in the same round trip
    assert commands == ["sh"]
