"""The ``slurm`` scheduler over the ``rest`` transport: slurmrestd with JWTs, real cluster.

slurmrestd (``tests/e2e/infra/slurm_remote.py``) listens on a loopback port with
``rest_auth/jwt``; tokens are minted with ``scontrol token`` for the dedicated user. The tests
run with an empty PATH: nothing but HTTP reaches the cluster. slurmrestd serves no files, so
without a mount the job directory is made beforehand, as a site's home directories are; with
one, the submission makes it. Logs, ``delete`` and workspaces go through the ``mount``
setting: here the dedicated user's home is "mounted" at a path of the test's own (a symbolic
link), as an NFS mount of the cluster's home directories would be on an orchestrator's worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.slurm import SlurmCluster
from tests.e2e.infra.slurm_remote import SSH_USER, SlurmRestd, ensure_user
from tests.e2e.slurm_remote_checks import (
    outputs_through_the_mount,
    retry_finds_the_job_over_the_cfg_transport,
)
from tether.schedulers.api import JOB_KEY, DescribeAppResponse
from tether.schedulers.slurm.render import SlurmConfigError
from tether.schedulers.slurm.scheduler import SlurmScheduler, SlurmSubmitError, create_scheduler
from tether.schedulers.slurm.transport import SlurmTransportError
from tether.specs import AppDef, AppState, Role
from tether.workspace import Workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE_S = 120.0


@pytest.fixture
def token(slurm_cluster: SlurmCluster) -> str:
    return slurm_cluster.token(SSH_USER)


@pytest.fixture
def no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No program on PATH at all: no Slurm client, no ssh."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("squeue") is None


@pytest.fixture
def sched(
    slurm_restd: SlurmRestd, token: str, no_path: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlurmScheduler]:
    monkeypatch.setenv("SLURM_JWT", token)
    s = create_scheduler("e2e", transport="rest", rest_url=slurm_restd.url)
    yield s
    s.close()


@pytest.fixture
def cfg() -> Iterator[dict[str, Any]]:
    user = ensure_user(SSH_USER)
    job_dir = Path(user.pw_dir) / "tether-rest-e2e" / uuid.uuid4().hex[:12]
    job_dir.mkdir(parents=True)
    for p in (job_dir, job_dir.parent):
        os.chown(p, user.pw_uid, user.pw_gid)
    yield {"job_dir": str(job_dir)}
    shutil.rmtree(job_dir, ignore_errors=True)


def sh(name: str, script: str, n: int = 1) -> Role:
    return Role(name, entrypoint="bash", args=["-c", script], num_replicas=n)


def done(sched: SlurmScheduler, app_id: str, want: set[AppState] | None = None) -> Any:
    states = want or {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        desc: DescribeAppResponse | None = sched.describe(app_id)
        assert desc is not None, f"slurm forgot job {app_id}"
        if desc.state in states:
            return desc
        assert time.monotonic() < deadline, f"job {app_id} still {desc.state}: {desc.msg}"
        time.sleep(0.3)


def test_submit_describe_list_over_rest(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    ok = sched.submit(
        AppDef("restok", roles=[sh("w", "echo hello $TETHER_REPLICA_ID", 2)],
               metadata={JOB_KEY: key}),
        {**cfg, "time": "5", "partition": "debug"},
    )  # fmt: skip
    bad = sched.submit(AppDef("restbad", roles=[sh("w", "exit 3")]), cfg)
    assert done(sched, ok).state == AppState.SUCCEEDED
    d_bad = done(sched, bad)
    assert d_bad.state == AppState.FAILED and "exit code 3" in d_bad.msg
    # the job ran as the token's user, in the job directory, with both replicas
    out = Path(cfg["job_dir"]) / f"restok-{ok}"
    assert sorted(p.read_text() for p in out.glob("w-*.out")) == ["hello 0\n", "hello 1\n"]
    assert [a.app_id for a in sched.find_jobs(key)] == [ok]
    listed = {a.app_id: a.state for a in sched.list()}
    assert listed[ok] == AppState.SUCCEEDED and listed[bad] == AppState.FAILED


def test_heterogeneous_job_and_cancel_over_rest(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    app = AppDef("resthet", roles=[sh("a", "exec sleep 600"), sh("b", "exec sleep 600")])
    app_id = sched.submit(app, cfg)
    desc = done(sched, app_id, {AppState.RUNNING})
    assert [r.role for r in desc.roles_statuses] == ["a", "b"]
    sched.cancel(app_id)
    assert done(sched, app_id).state == AppState.CANCELLED
    sched.cancel(app_id)  # idempotent


def test_logs_and_unsupported_flags_are_refused_with_what_to_do(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    app_id = sched.submit(AppDef("restlog", roles=[sh("w", "echo x")]), cfg)
    with pytest.raises(SlurmConfigError, match=r"transport rest .* cannot read; mount the clu"):
        list(sched.log_iter(app_id, "w", 0))
    with pytest.raises(SlurmConfigError, match=r"'--exclude=n2' has no field"):
        sched.submit(AppDef("x", roles=[sh("w", "true")]), {**cfg, "exclude": "n2"})


def test_slurm_refusal_is_a_submit_error(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    with pytest.raises(SlurmSubmitError, match="slurm rejected job 'nopart'"):
        sched.submit(AppDef("nopart", roles=[sh("w", "true")]), {**cfg, "partition": "nope"})


@pytest.fixture
def expired(slurm_cluster: SlurmCluster) -> str:
    """A token that has expired."""
    tok = slurm_cluster.token(SSH_USER, lifespan_s=1)
    time.sleep(2.5)  # let it expire (setting up the case, not a timing assertion)
    return tok


def test_bad_tokens_and_a_down_daemon_name_transport_url_and_fix(
    expired: str, slurm_restd: SlurmRestd, cfg: dict[str, Any], no_path: None, tmp_path: Path
) -> None:
    app = AppDef("nope", roles=[sh("w", "true")])
    cases = {
        "invalid": (slurm_restd.url, "not-a-jwt", "JWT was refused"),
        "expired": (slurm_restd.url, expired, "JWT was refused"),
        "down": (f"http://127.0.0.1:{free_ports(1)[0]}", expired, "is slurmrestd running"),
    }
    for name, (url, tok, want) in cases.items():
        jwt_file = tmp_path / f"{name}.jwt"
        jwt_file.write_text(tok)
        sched = create_scheduler("e2e", transport="rest", rest_url=url, user=SSH_USER,
                                 jwt_file=str(jwt_file))  # fmt: skip
        with pytest.raises(SlurmTransportError) as err:
            sched.submit(app, cfg)
        text = str(err.value)
        assert text.startswith(f"slurm transport rest to {url}:"), (name, text)
        assert want in text, (name, text)
        assert tok not in text or name == "down"


def test_version_is_negotiated(sched: SlurmScheduler, slurm_restd: SlurmRestd) -> None:
    newest = max(p.split("/")[1] for p in slurm_restd.offered)
    assert sched.client.version == newest  # type: ignore[attr-defined]


def test_watch_hub_follows_jobs_over_rest(sched: SlurmScheduler, cfg: dict[str, Any]) -> None:
    from tether.schedulers.watch import Subscription, WatchHub

    ids = [sched.submit(AppDef("w", roles=[sh("w", f"exit {i}")]), cfg) for i in range(3)]
    hub = WatchHub()
    with Subscription(hub) as sub:
        for app_id in ids:
            sub.follow(sched, app_id)
        finals = {e.app_id: e.state for e in sub.events(timeout=120) if e.final}
        assert next(iter(hub._views)).connection.startswith("rest:http://127.0.0.1:")
    hub.close()
    assert finals == {ids[0]: AppState.SUCCEEDED, ids[1]: AppState.FAILED,
                      ids[2]: AppState.FAILED}  # fmt: skip


@pytest.fixture
def mounted(
    slurm_restd: SlurmRestd, token: str, no_path: None, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SlurmScheduler]:
    """The rest scheduler with the user's home "mounted" at another path of this machine."""
    home = ensure_user(SSH_USER).pw_dir
    here = tmp_path / "hpc-home"
    here.symlink_to(home)
    monkeypatch.setenv("SLURM_JWT", token)
    s = create_scheduler("e2e", transport="rest", rest_url=slurm_restd.url,
                         mount=f"{home}={here}")  # fmt: skip
    yield s
    s.close()


def test_logs_delete_through_the_mounted_shared_filesystem(
    mounted: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    app = AppDef("restlogs", roles=[sh("w", "for i in 1 2 3; do echo line $i; sleep 0.3; done")])
    app_id = mounted.submit(app, cfg)
    followed = list(mounted.log_iter(app_id, "w", 0, should_tail=True))
    assert followed == ["line 1\n", "line 2\n", "line 3\n"]
    assert done(mounted, app_id).state == AppState.SUCCEEDED
    logs = Path(cfg["job_dir"]) / f"restlogs-{app_id}"
    assert logs.is_dir()
    mounted.delete(app_id)
    assert mounted.describe(app_id) is None
    assert app_id not in [a.app_id for a in mounted.list()]
    assert not logs.exists() and (Path(cfg["job_dir"]) / f".restlogs-{app_id}.deleted").exists()


def test_without_a_mount_delete_and_workspaces_say_how_to_get_them(
    sched: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    app_id = sched.submit(AppDef("restnodel", roles=[sh("w", "true")]), cfg)
    with pytest.raises(SlurmTransportError, match=r"give mount=CLUSTER_DIR=LOCAL_DIR"):
        sched.delete(app_id)
    with pytest.raises(SlurmTransportError, match=r"workspace cannot be copied.*mount="):
        sched.submit(AppDef("ws", roles=[sh("w", "true")]), cfg, workspace=str(tmp_path))


def _submit_with_workspace(sched: SlurmScheduler, app: AppDef, cfg: dict[str, Any],
                           project: Path) -> str:  # fmt: skip
    """Copies the workspace, hands the copy to the job's user, then submits: the test runs as
    root, the jobs as the dedicated user (on a real mount both are the same user)."""
    for role in app.roles:
        role.workspace = Workspace.from_str(str(project))
    sched.build_workspaces(app.roles, sched.resolve_opts(cfg))
    user = ensure_user(SSH_USER)
    for root, dirs, files in os.walk(Path(cfg["job_dir"]) / "workspaces"):
        for name in [".", *dirs, *files]:
            os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid)
    return sched.schedule(sched.submit_dryrun(app, cfg))


def test_dir_workspace_is_copied_into_the_mount_once_per_content(
    mounted: SlurmScheduler, cfg: dict[str, Any], tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "data.txt").write_text("from the workspace\n")
    (project / ".tetherignore").write_text("secret.env\n")
    (project / "secret.env").write_text("TOKEN=x\n")

    def app() -> AppDef:
        return AppDef("ws", roles=[sh("w", "cat pkg/data.txt; ls secret.env 2>&1")])

    first = _submit_with_workspace(mounted, app(), cfg, project)
    assert done(mounted, first).state == AppState.FAILED  # ls of the ignored file fails
    lines = list(mounted.log_iter(first, "w", 0))
    assert lines[0] == "from the workspace\n" and "No such file" in lines[1]
    copies = Path(cfg["job_dir"]) / "workspaces"
    [copy] = copies.iterdir()
    os.utime(project / "pkg" / "data.txt", (1, 1))  # same content, other time: not copied again
    second = _submit_with_workspace(mounted, app(), cfg, project)
    done(mounted, second)
    assert list(copies.iterdir()) == [copy]
    (project / "pkg" / "data.txt").write_text("changed\n")
    third = _submit_with_workspace(mounted, app(), cfg, project)
    done(mounted, third)
    assert next(iter(mounted.log_iter(third, "w", 0))) == "changed\n"
    assert len(list(copies.iterdir())) == 2


def test_outputs_root_under_the_mount_reaches_the_job_and_comes_back(
    slurm_restd: SlurmRestd, token: str, no_path: None, cfg: dict[str, Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("SLURM_JWT", token)
    params = {"transport": "rest", "rest_url": slurm_restd.url}
    outputs_through_the_mount(params, cfg, tmp_path, monkeypatch)


def test_a_retry_finds_the_job_over_the_transport_given_only_in_the_run_options(
    slurm_restd: SlurmRestd, token: str, no_path: None, cfg: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("SLURM_JWT", token)
    remote = {"transport": "rest", "rest_url": slurm_restd.url}
    retry_finds_the_job_over_the_cfg_transport({}, {**cfg, **remote}, DEADLINE_S)


_SUBMIT_AS_USER = """
import sys
from tether.schedulers.slurm.scheduler import create_scheduler
from tether.specs import AppDef, Role
url, mount, job_dir = sys.argv[1:]
s = create_scheduler("e2e", transport="rest", rest_url=url, mount=mount)
role = Role("w", entrypoint="bash", args=["-c", "echo made; pwd"])
print(s.submit(AppDef("mkdir", roles=[role]), {"job_dir": job_dir}))
"""


def test_the_job_dir_is_created_through_the_mount(
    slurm_restd: SlurmRestd, token: str, no_path: None, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # the submitting process runs as the job's user, as a worker whose mount is the user's
    user = ensure_user(SSH_USER)
    link_dir = Path(tempfile.mkdtemp(prefix="tether-mnt-", dir="/tmp"))
    link_dir.chmod(0o755)
    here = link_dir / "hpc-home"
    here.symlink_to(user.pw_dir)
    top = Path(user.pw_dir) / "tether-rest-e2e" / uuid.uuid4().hex[:12]
    job_dir = top / "not" / "yet"
    mount = f"{user.pw_dir}={here}"
    env = {"PATH": str(tmp_path), "HOME": user.pw_dir, "SLURM_JWT": token,
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # fmt: skip
    try:
        child = subprocess.run(
            ["/usr/bin/setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
             "--init-groups", sys.executable, "-c", _SUBMIT_AS_USER, slurm_restd.url, mount,
             str(job_dir)],
            env=env, capture_output=True, text=True, timeout=120, cwd="/",
        )  # fmt: skip
        assert child.returncode == 0, child.stderr
        app_id = child.stdout.split()[-1]
        monkeypatch.setenv("SLURM_JWT", token)
        s = create_scheduler("e2e", transport="rest", rest_url=slurm_restd.url, mount=mount)
        try:
            assert done(s, app_id).state == AppState.SUCCEEDED
            assert list(s.log_iter(app_id, "w", 0)) == ["made\n", f"{job_dir}\n"]
        finally:
            s.close()
        made = job_dir.stat()
        assert made.st_uid == user.pw_uid and made.st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(link_dir, ignore_errors=True)


def test_without_a_mount_a_missing_job_dir_is_named_when_the_job_fails(
    sched: SlurmScheduler, cfg: dict[str, Any]
) -> None:
    missing = Path(cfg["job_dir"]) / "missing"
    app_id = sched.submit(AppDef("nodir", roles=[sh("w", "true")]), {"job_dir": str(missing)})
    desc = done(sched, app_id)
    assert desc.state == AppState.FAILED and "JobLaunchFailure" in desc.msg
    assert f"could not start the job in job_dir {missing}" in desc.msg, desc.msg
    assert "give mount" in desc.msg and not missing.exists()
