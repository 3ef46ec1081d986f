"""The ``slurm`` scheduler's sacct path, against a real cluster with accounting.

The cluster runs MariaDB and slurmdbd too (``SlurmCluster(accounting=True)``; install them
with ``tests/e2e/infra/setup.d/31-slurmdbd.sh``). Slurm keeps finished jobs in ``squeue`` for
``MinJobAge`` seconds and purges them on its own schedule, which a test cannot trigger; so
:class:`ForgetfulClient` answers ``squeue`` with nothing, as after that purge, and the
scheduler must get every state from the real ``sacct``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm import SlurmCluster, SlurmUnavailable, missing_accounting_tools
from tether.schedulers.api import JOB_KEY, DescribeAppResponse
from tether.schedulers.slurm.client import SlurmClient
from tether.schedulers.slurm.scheduler import SlurmScheduler, SlurmSubmitError
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class ForgetfulClient(SlurmClient):
    """A real client whose ``squeue`` has forgotten every job (see the module docs)."""

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        return []


@pytest.fixture(scope="module")
def acct_cluster() -> Iterator[SlurmCluster]:
    missing = missing_accounting_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; run tests/e2e/infra/setup.d/31-slurmdbd.sh")
    try:
        cluster = SlurmCluster(accounting=True).start()
    except SlurmUnavailable as e:
        pytest.fail(f"the accounting cluster did not start: {e}")
    yield cluster
    cluster.stop()


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
    assert after == before  # no job, pending or otherwise
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".sbatch"]  # no script left
