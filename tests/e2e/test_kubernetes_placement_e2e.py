"""Failover after a placement timeout, on a real Kubernetes node and its real kube-scheduler.

The job's pods ask for a node label no node has (``node_selector``), so the real
kube-scheduler leaves them ``Pending`` (``PodScheduled=False``, ``Unschedulable``). With
``RecoveryPolicy(placement_timeout_s=T)`` and the candidates ``["kubernetes", "local_cwd"]``,
the follower cancels the Kubernetes attempt once it was unplaced for ``T`` seconds, waits
until the apiserver says it is gone (CANCELLED), records the move in the chain's journal and
submits the same attempt to ``local_cwd``, where it runs: one logical job, one attempt, its
refusal and its withdrawn Kubernetes job recorded. A follower killed after recording the
intent to withdraw is replaced by ``tether wait HANDLE`` in another process, which finishes
the move.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_node_fixtures import RealKube
from tether.runner import Runner
from tether.runner.journal import Journal
from tether.specs import AppDef, AppState, CfgVal, RecoveryPolicy, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PLACEMENT_S = 3.0
NOWHERE = {"tether-e2e/pool": "nowhere"}
"""A node label no node of the cluster has."""


@pytest.fixture
def ns(real_kube: RealKube, request: pytest.FixtureRequest) -> str:
    name = "p-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(real_kube.api, name)
    return name


@pytest.fixture
def runner(real_kube: RealKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Runner]:  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner(scheduler_params={"kubernetes": {"client": real_kube.api}}) as r:
        yield r


def _app(timeout_s: float) -> AppDef:
    role = Role("worker", image="busybox:1.36", entrypoint=sys.executable,
                args=["-c", "import os; print('ran attempt', os.environ['TETHER_ATTEMPT'])"])
    policy = RecoveryPolicy(max_recoveries=0, placement_timeout_s=timeout_s)
    return AppDef("placeme", roles=[role], recovery=policy)


def _unschedulable_pod(api: Any, ns: str) -> None:
    """Waits until the real kube-scheduler said the job's pod fits no node."""
    v1 = client.CoreV1Api(api)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for pod in v1.list_namespaced_pod(ns).items:
            conds = pod.status.conditions or []
            if any(c.type == "PodScheduled" and c.status == "False"
                   and c.reason == "Unschedulable" for c in conds):  # fmt: skip
                assert not pod.spec.node_name
                return
        time.sleep(0.3)
    raise AssertionError(f"no unschedulable pod in {ns}")


def _moved_to_local(runner: Runner, handle: str) -> str:
    """Checks the one attempt moved to local_cwd; the withdrawn Kubernetes job's handle."""
    [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd"
    assert attempt["handle"].startswith("local_cwd://")
    assert not attempt["withdrawing"]
    [refusal] = attempt["refused"]
    assert refusal.startswith("kubernetes: not placed within"), refusal
    [withdrawn] = attempt["withdrawn"]
    assert withdrawn.startswith("kubernetes://")
    gone = runner.status(withdrawn)
    assert gone is not None and gone.state == AppState.CANCELLED, gone
    return str(withdrawn)


def test_an_unplaced_pod_fails_over_to_local_cwd_after_the_placement_timeout(
    runner: Runner, real_kube: RealKube, ns: str
) -> None:
    """``Runner.run`` + ``Runner.wait``: the pod no node takes is cancelled after the
    timeout, and the same attempt runs on local_cwd under the same logical handle."""
    cfg: dict[str, CfgVal] = {"namespace": ns, "node_selector": NOWHERE}
    handle = runner.run(_app(PLACEMENT_S), ["kubernetes", "local_cwd"], cfg, job_key=f"pl-{ns}")
    assert handle.startswith("chain://")
    [first] = runner.attempts(handle)
    assert first["scheduler"] == "kubernetes" and first["handle"].startswith("kubernetes://")
    _unschedulable_pod(real_kube.api, ns)  # nothing follows the job yet: nothing withdraws it
    status = runner.wait(handle, wait_interval=0.5, timeout=180)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    assert status.msg.startswith("attempt 0 on local_cwd"), status.msg
    assert _moved_to_local(runner, handle) == first["handle"]
    assert list(runner.log_lines(handle, "worker")) == [
        "[tether] attempt 0 on local_cwd\n", "ran attempt 0\n"]
    # the Kubernetes job never ran: none of its pods was ever bound to a node
    pods = client.CoreV1Api(real_kube.api).list_namespaced_pod(ns).items
    assert all(not p.spec.node_name for p in pods)


def test_a_watch_fails_over_as_wait_does(runner: Runner, real_kube: RealKube, ns: str) -> None:
    """``Runner.awatch`` (how a deferrable Airflow task's trigger follows a logical job)
    enforces the timeout too: the caller hears the chain PENDING, then its one final event,
    SUCCEEDED on local_cwd."""
    cfg: dict[str, CfgVal] = {"namespace": ns, "node_selector": NOWHERE}
    handle = runner.run(_app(PLACEMENT_S), ["kubernetes", "local_cwd"], cfg)
    [first] = runner.attempts(handle)

    async def follow() -> list[Any]:
        return [ev async for ev in runner.awatch([handle], timeout=180, wait_interval=0.5)]

    events = asyncio.run(follow())
    assert [ev.app_handle for ev in events] == [handle] * len(events)
    assert [ev.final for ev in events].count(True) == 1 and events[-1].final
    assert events[-1].state == AppState.SUCCEEDED, events[-1]
    assert _moved_to_local(runner, handle) == first["handle"]


def test_tether_wait_finishes_a_withdrawal_its_killed_follower_began(
    runner: Runner, real_kube: RealKube, ns: str, tmp_path: Path
) -> None:
    """A follower killed right after recording the intent to withdraw the unplaced attempt
    (before cancelling it) leaves ``withdrawing`` in the journal: ``tether wait HANDLE`` in
    another process (a watch) cancels it, confirms it gone and runs it on local_cwd."""
    cfg: dict[str, CfgVal] = {"namespace": ns, "node_selector": NOWHERE}
    # a timeout this process never reaches: the withdrawal is the killed follower's
    handle = runner.run(_app(3600), ["kubernetes", "local_cwd"], cfg, job_key=f"kill-{ns}")
    _unschedulable_pod(real_kube.api, ns)
    [first] = runner.attempts(handle)
    journal = Journal(f"kill-{ns}", tmp_path / "state" / "recovery")
    with journal.lock():
        chain = journal.load()
        assert chain is not None and chain.current.handle == first["handle"]
        chain.current.withdrawing = True
        journal.save(chain)
    status = runner.status(handle)
    assert status is not None and status.state == AppState.PENDING
    assert "cancelling it there to submit it to local_cwd" in status.msg
    env = dict(os.environ, KUBECONFIG=str(real_kube.cluster.kubeconfig_path))
    res = subprocess.run([sys.executable, "-m", "tether.cli.main", "wait", handle], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=240,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == f"{handle} SUCCEEDED"
    assert _moved_to_local(runner, handle) == first["handle"]
