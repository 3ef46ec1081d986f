"""The ``slurm`` scheduler's sacct path, against a real cluster with accounting.

The cluster runs MariaDB and slurmdbd too (``SlurmCluster(accounting=True)``; install them
with ``tests/e2e/infra/setup.d/31-slurmdbd.sh``). Slurm keeps finished jobs in ``squeue`` for
``MinJobAge`` seconds and purges them on its own schedule, which a test cannot trigger; so
:class:`ForgetfulClient` answers ``squeue`` with nothing, as after that purge, and the
scheduler must get every state from the real ``sacct``. Over the ``rest`` transport the same
records come from slurmrestd's ``slurmdb`` API (the cluster accepts JWTs, slurmdbd too, and
slurmrestd loads the ``openapi/dbv0.0.3x`` plugins); :class:`ForgetfulRest` forgets squeue the
same way.
"""

from __future__ import annotations

import getpass
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.runner import Runner
from tether.schedulers.api import JOB_KEY, DescribeAppResponse
from tether.schedulers.errors import CapacityError
from tether.schedulers.slurm.client import SlurmClient
from tether.schedulers.slurm.rest import RestClient
from tether.schedulers.slurm.scheduler import (
    SlurmCapacityError,
    SlurmScheduler,
    SlurmSubmitError,
)
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class ForgetfulClient(SlurmClient):
    """A real client whose ``squeue`` has forgotten every job (see the module docs)."""

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        return []


class ForgetfulRest(RestClient):
    """A real slurmrestd client whose ``squeue`` has forgotten every job."""

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        return []


@pytest.fixture(scope="module")
def acct_cluster(slurm_acct_cluster: SlurmCluster) -> SlurmCluster:
    """The session's cluster with accounting (``tests/e2e/infra/fixtures.py``)."""
    return slurm_acct_cluster


def schedulers(cluster: SlurmCluster) -> tuple[SlurmScheduler, SlurmScheduler]:
    live = SlurmScheduler("e2e", slurm_conf=str(cluster.conf))
    forgetful = SlurmScheduler("e2e", client=ForgetfulClient(slurm_conf=str(cluster.conf)))
    return live, forgetful


def sh(name: str, script: str) -> Role:
    return Role(name, entrypoint="bash", args=["-c", script])


def settled(sched: SlurmScheduler, app_id: str, state: AppState) -> DescribeAppResponse:
    """Polls until the (sacct-only) scheduler reports ``state``; slurmdbd lags a little."""
    deadline = time.monotonic() + 60
    while True:
        desc = sched.describe(app_id)
        if desc is not None and desc.state == state:
            return desc
        assert time.monotonic() < deadline, f"{app_id}: {desc}"
        time.sleep(0.3)


def test_states_and_reasons_from_sacct(acct_cluster: SlurmCluster, tmp_path: Path) -> None:
    live, acct = schedulers(acct_cluster)
    cfg = {"job_dir": str(tmp_path)}
    ok = live.submit(AppDef("ok", roles=[sh("a", "true"), sh("b", "true")]), cfg)
    bad = live.submit(AppDef("bad", roles=[sh("a", "exit 4")]), cfg)
    key = f"acct-{time.time_ns()}"
    long = live.submit(AppDef("long", roles=[sh("a", "sleep 300")], metadata={JOB_KEY: key}), cfg)
    settled(live, long, AppState.RUNNING)
    live.cancel(long)

    d_ok = settled(acct, ok, AppState.SUCCEEDED)
    assert [r.role for r in d_ok.roles_statuses] == ["a", "b"]  # the het job's two components
    d_bad = settled(acct, bad, AppState.FAILED)
    assert "exit code 4" in d_bad.msg
    d_long = settled(acct, long, AppState.CANCELLED)
    assert "cancelled by uid" in d_long.msg and d_long.job_key == key
    deadline = time.monotonic() + 30  # sacct's time-window query sees a job a moment later
    while [a.app_id for a in acct.find_jobs(key)] != [long]:  # identity read back from sacct
        assert time.monotonic() < deadline, f"find_jobs({key!r}) never found job {long}"
        time.sleep(0.5)
    assert acct.describe("999999") is None


@pytest.mark.parametrize(
    ("option", "slurm_says"),
    [
        ("account", "Invalid account or account/partition combination specified"),
        ("qos", "Invalid qos specification"),
    ],
)
def test_unknown_account_or_qos_is_slurms_error_and_leaves_no_job(
    acct_cluster: SlurmCluster, tmp_path: Path, option: str, slurm_says: str
) -> None:
    """The cluster enforces associations and QOS: sbatch refuses, tether says what Slurm said."""
    live, _ = schedulers(acct_cluster)
    before = acct_cluster.run("squeue", "--noheader", "--states=all", "--format=%i").stdout
    with pytest.raises(SlurmSubmitError) as e:
        live.submit(AppDef("nope", roles=[sh("a", "true")]),
                    {"job_dir": str(tmp_path), option: "no-such-" + option})  # fmt: skip
    assert slurm_says in str(e.value) and "slurm rejected job 'nope'" in str(e.value)
    after = acct_cluster.run("squeue", "--noheader", "--states=all", "--format=%i").stdout
    # no job, pending or otherwise, was added (not equality: slurmctld purges the finished
    # jobs of earlier tests from squeue MinJobAge after their end, at any moment)
    assert set(after.split()) <= set(before.split())
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".sbatch"]  # no script left


def _qos_without_room(cluster: SlurmCluster) -> str:
    """A QOS that allows this user no job (``MaxSubmitJobsPerUser=0``), granted to the user;
    returns its name once slurmctld enforces it (slurmdbd pushes the change a moment later:
    until then sbatch answers ``Invalid qos specification``)."""
    name = "noroom"
    cluster.run("sacctmgr", "-i", "add", "qos", name, "MaxSubmitJobsPerUser=0", check=False)
    cluster.run("sacctmgr", "-i", "modify", "user", getpass.getuser(), "set", f"qos+={name}")
    return name


def test_qos_submit_limit_is_a_capacity_error_and_fails_over(
    acct_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A QOS whose submit limit is reached: sbatch refuses with ``job submit limit``, tether
    raises a CapacityError (kind ``quota``), and a run on ``["slurm", "local_cwd"]`` moves
    to local_cwd under one logical handle, with ``qos`` given to slurm only."""
    qos = _qos_without_room(acct_cluster)
    live, _ = schedulers(acct_cluster)
    deadline = time.monotonic() + 60
    while True:
        try:
            live.submit(AppDef("full", roles=[sh("a", "true")]),
                        {"job_dir": str(tmp_path), "qos": qos})  # fmt: skip
            raise AssertionError("sbatch took a job over the QOS's submit limit")
        except SlurmCapacityError as e:
            err = e
            break
        except SlurmSubmitError as e:  # the QOS not yet known to slurmctld
            assert time.monotonic() < deadline, f"the QOS never held: {e}"
            time.sleep(0.5)
    assert isinstance(err, CapacityError) and err.kind == "quota" and err.backend == "slurm"
    assert "job submit limit" in err.detail and "another scheduler may take the job" in str(err)

    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    role = Role("w", entrypoint=sys.executable, args=["-c", "print('ran here')"])
    with Runner("e2e", scheduler_params={"slurm": {"slurm_conf": str(acct_cluster.conf)}}) as r:
        handle = r.run(AppDef("moved", roles=[role]), ["slurm", "local_cwd"],
                       {"job_dir": str(tmp_path), "qos": qos})  # fmt: skip
        [attempt] = r.attempts(handle)
        assert attempt["scheduler"] == "local_cwd" and attempt["refused"][0].startswith("slurm: ")
        status = r.wait(handle, wait_interval=0.2)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert list(r.log_lines(handle, "w")) == ["[tether] attempt 0 on local_cwd\n",
                                                  "ran here\n"]  # fmt: skip


@pytest.fixture(scope="module")
def acct_restd(acct_cluster: SlurmCluster) -> Iterator[Any]:
    """slurmrestd with the slurmdb API in front of the accounting cluster."""
    from tests.e2e.infra.slurm_remote import SSH_USER, SlurmRestd, ensure_user, missing_remote_tools

    missing = missing_remote_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; run tests/e2e/infra/setup.d/32-slurm-remote.sh")
    ensure_user(SSH_USER)
    acct_cluster.add_user(SSH_USER)  # the cluster enforces associations
    with SlurmRestd(acct_cluster) as restd:
        yield restd


def test_states_identity_and_listing_from_slurmdb_over_rest(
    acct_cluster: SlurmCluster, acct_restd: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from tests.e2e.infra.slurm_remote import SSH_USER, ensure_user
    from tether.schedulers.slurm.transport import TransportSettings

    user = ensure_user(SSH_USER)
    job_dir = Path(user.pw_dir) / f"tether-acct-{time.time_ns()}"
    job_dir.mkdir()
    os.chown(job_dir, user.pw_uid, user.pw_gid)
    monkeypatch.setenv("SLURM_JWT", acct_cluster.token(SSH_USER))
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client: HTTP only
    settings = TransportSettings(transport="rest", rest_url=acct_restd.url)
    live = SlurmScheduler("e2e", transport="rest", rest_url=acct_restd.url)
    acct = SlurmScheduler("e2e", client=ForgetfulRest(settings))
    cfg = {"job_dir": str(job_dir)}
    ok = live.submit(AppDef("ok", roles=[sh("a", "true"), sh("b", "true")]), cfg)
    bad = live.submit(AppDef("bad", roles=[sh("a", "exit 4")]), cfg)
    key = f"acct-rest-{time.time_ns()}"
    long = live.submit(AppDef("long", roles=[sh("a", "sleep 300")], metadata={JOB_KEY: key}), cfg)
    settled(live, long, AppState.RUNNING)
    live.cancel(long)

    d_ok = settled(acct, ok, AppState.SUCCEEDED)
    assert [r.role for r in d_ok.roles_statuses] == ["a", "b"]  # the het job's two components
    d_bad = settled(acct, bad, AppState.FAILED)
    assert d_bad.msg.startswith("a: FAILED")
    assert "exit code 0" not in d_bad.msg  # slurmrestd 22.05's slurmdb says 0 for every job
    d_long = settled(acct, long, AppState.CANCELLED)
    assert d_long.job_key == key
    deadline = time.monotonic() + 30  # the time-window query sees a job a moment later
    while [a.app_id for a in acct.find_jobs(key)] != [long]:  # identity read back from slurmdb
        assert time.monotonic() < deadline, f"find_jobs({key!r}) never found job {long}"
        time.sleep(0.5)
    listed = {a.app_id: a.state for a in acct.list()}
    assert listed[ok] == AppState.SUCCEEDED and listed[bad] == AppState.FAILED
    assert acct.describe("999999") is None
