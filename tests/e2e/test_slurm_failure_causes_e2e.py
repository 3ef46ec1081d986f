"""Slurm's infrastructure failures told apart from application failures, on a real cluster
(munged, slurmctld, two slurmd nodes; ``tests/e2e/infra/slurm.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm import SlurmCluster
from tether.runner import Runner
from tether.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler
from tether.specs import AppDef, AppState, AppStatus, FailureCause, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def sched(slurm_cluster: SlurmCluster) -> Iterator[SlurmScheduler]:
    s = create_scheduler("e2e", slurm_conf=str(slurm_cluster.conf))
    yield s
    s.close()


def _status(sched: SlurmScheduler, app_id: str) -> AppStatus:
    desc = sched.describe(app_id)
    assert desc is not None, app_id
    return AppStatus(desc.state, msg=desc.msg, roles=desc.roles_statuses, failure=desc.failure)


def _wait(sched: SlurmScheduler, app_id: str, states: set[AppState]) -> AppStatus:
    deadline = time.monotonic() + 200
    while True:
        st = _status(sched, app_id)
        if st.state in states:
            return st
        assert time.monotonic() < deadline, f"job {app_id} still {st.state}: {st.msg}"
        time.sleep(0.3)


def test_node_set_down_mid_run_is_node_lost(
    sched: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    role = Role("w", entrypoint="bash", args=["-c", "exec sleep 300"])
    app_id = sched.submit(AppDef("nodefail", roles=[role]), {"job_dir": str(tmp_path)})
    running = _wait(sched, app_id, {AppState.RUNNING})
    node = running.roles[0].replicas[0].hostname
    assert node in slurm_cluster.nodes, running
    try:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=DOWN",
                          "reason=tether-e2e")  # fmt: skip
        final = _wait(sched, app_id, {AppState.FAILED, AppState.SUCCEEDED, AppState.CANCELLED})
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=RESUME", check=False)
    assert final.state == AppState.FAILED, final
    cause = final.cause()
    assert cause is not None and cause.cause == FailureCause.NODE_LOST, final
    assert cause.is_infrastructure and cause.reason.startswith("NODE_FAIL")
    assert "Cause: node_lost (NODE_FAIL" in final.format()


def test_exit_code_is_an_application_failure(tmp_path: Path, slurm_cluster: SlurmCluster,
                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Through the Runner, as ``tether status`` shows it."""
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    role = Role("w", entrypoint="bash", args=["-c", "exit 4"])
    params: dict[str, Any] = {"slurm": {"slurm_conf": str(slurm_cluster.conf)}}
    with Runner(scheduler_params=params) as r:
        handle = r.run(AppDef("appfail", roles=[role]), "slurm", {"job_dir": str(tmp_path)})
        final = r.wait(handle, wait_interval=0.5, timeout=200)
    assert final is not None and final.state == AppState.FAILED, final
    cause = final.cause()
    assert cause is not None and cause.cause == FailureCause.APPLICATION
    assert cause.exit_code == 4 and not cause.is_infrastructure
