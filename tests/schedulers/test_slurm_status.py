"""Slurm states -> AppState, and the app view from squeue/sacct records.

The squeue records are shaped like Slurm 22.05's ``squeue --json`` (as the e2e tests see it);
the sacct text is written by hand in ``sacct --parsable2`` form, because the test cluster has
no accounting (slurmdbd) to produce it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tether.schedulers.slurm.render import Marker, make_comment
from tether.schedulers.slurm.status import (
    SLURM_STATE,
    from_sacct,
    from_squeue,
    role_statuses,
    to_app_state,
)
from tether.specs import AppState

COMMENT = make_comment(Marker(roles=[("trainer", 2), ("ps", 1)], job_key="k1"))


def rec(job_id: int, state: str, het: int | None = None, off: int = 0, **kw: Any) -> dict[str, Any]:
    return {
        "job_id": job_id, "het_job_id": het or 0, "het_job_offset": off, "job_state": state,
        "state_reason": kw.pop("reason", "None"), "comment": kw.pop("comment", COMMENT),
        "name": "app", "current_working_directory": "/jobs", "exit_code": kw.pop("status", 0),
        "restart_cnt": kw.pop("restarts", 0), "nodes": "n1", "submit_time": 1000 + job_id, **kw,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("PENDING", AppState.PENDING), ("RUNNING", AppState.RUNNING),
        ("COMPLETED", AppState.SUCCEEDED), ("FAILED", AppState.FAILED),
        ("CANCELLED by 0", AppState.CANCELLED), ("TIMEOUT", AppState.FAILED),
        ("NODE_FAIL", AppState.FAILED), ("PREEMPTED", AppState.FAILED),
        ("OUT_OF_MEMORY", AppState.FAILED), ("BOOT_FAIL", AppState.FAILED),
        ("DEADLINE", AppState.FAILED), ("REQUEUED", AppState.PENDING),
        ("COMPLETING", AppState.RUNNING), (["RUNNING", "COMPLETING"], AppState.RUNNING),
        ("WEIRD", AppState.UNKNOWN),
    ],
)  # fmt: skip
def test_state_table(raw: Any, state: AppState) -> None:
    assert to_app_state(raw) == state


def test_every_documented_state_is_mapped() -> None:
    documented = [
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "COMPLETING",
        "CONFIGURING",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "STOPPED",
        "REVOKED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
    ]
    assert [s for s in documented if s not in SLURM_STATE] == []


def test_heterogeneous_job_is_one_app_with_reason() -> None:
    jobs = [
        rec(7, "FAILED", het=7, off=0, reason="NonZeroExitCode", status=3 << 8),
        rec(8, "FAILED", het=7, off=1, reason="NonZeroExitCode", status=3 << 8),
        rec(9, "PENDING", reason="Resources", comment="not tether's"),
    ]
    [app] = from_squeue(jobs)
    assert app.app_id == "7" and app.state == AppState.FAILED
    assert "trainer: FAILED (NonZeroExitCode, exit code 3)" in app.msg
    statuses = role_statuses(app)
    assert [(r.role, len(r.replicas)) for r in statuses] == [("trainer", 2), ("ps", 1)]
    assert statuses[0].replicas[1].exit_code == 3


def test_pending_reason_and_running_mix() -> None:
    [app] = from_squeue([rec(5, "PENDING", reason="Priority")])
    assert app.state == AppState.PENDING and app.msg == "PENDING (Priority)"
    [app] = from_squeue([rec(5, "RUNNING", het=5), rec(6, "PENDING", het=5, off=1)])
    assert app.state == AppState.RUNNING


def test_timeout_and_oom_are_failed_with_why() -> None:
    [app] = from_squeue([rec(5, "TIMEOUT", reason="TimeLimit")])
    assert app.state == AppState.FAILED and "time limit" in app.msg
    [app] = from_squeue([rec(5, "OUT_OF_MEMORY", reason="OutOfMemory", status=9)])
    assert "ran out of memory" in app.msg and "signal 9" in app.msg


def test_sacct_rows() -> None:
    text = "\n".join([
        f"12+0|app|FAILED|NonZeroExitCode|2:0|n1|{COMMENT}|/jobs|2026-01-01T10:00:00",
        f"12+1|app|CANCELLED by 0|None|0:15|n2|{COMMENT}|/jobs|2026-01-01T10:00:00",
        "12+0.batch|batch|FAILED||2:0|n1||||",
        "13|other|COMPLETED|None|0:0|n1|no marker|/x|2026-01-01T10:00:00",
    ])  # fmt: skip
    [app] = from_sacct(text)
    assert app.app_id == "12" and app.state == AppState.FAILED
    assert "exit code 2" in app.msg and app.job_dir == "/jobs" and app.marker.job_key == "k1"
    assert "ps: CANCELLED (cancelled by uid 0 (root)" in app.msg
