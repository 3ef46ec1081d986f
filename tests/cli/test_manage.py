"""status, describe, log, list, cancel and delete against real local_cwd apps."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.cli.conftest import Result
from tether.cli.common import CLIError, parse_time
from tether.runner import get_runner
from tether.specs import AppDef, AppState, Role


@pytest.fixture
def finished_app(tether: Callable[..., Result]) -> str:
    """A finished two-replica app with stdout and stderr lines and a secret in its env."""
    res = tether("run", "utils.sh", "--num_replicas", "2", "--env", "API_TOKEN=tok-123456",
                 "echo out-$TETHER_REPLICA_ID; echo err-$TETHER_REPLICA_ID >&2; "
                 "echo token=$API_TOKEN")
    assert res.code == 0, res.err
    return res.out.splitlines()[0]


def test_status(tether: Callable[..., Result], finished_app: str) -> None:
    res = tether("status", finished_app)
    assert res.code == 0
    assert "State: SUCCEEDED" in res.out and "sh[0]:SUCCEEDED" in res.out
    doc = json.loads(tether("status", "--json", finished_app).out)
    assert doc["state"] == "SUCCEEDED" and len(doc["roles"][0]["replicas"]) == 2
    res = tether("status", "--role", "nope", finished_app)
    assert res.code == 1 and "has no role 'nope'; roles: sh" in res.err


def test_unknown_app_is_a_one_line_error(tether: Callable[..., Result]) -> None:
    for cmd in ("status", "describe", "log", "cancel", "delete"):
        res = tether(cmd, "local_cwd://tether/nope-123")
        assert res.code == 1, cmd
        assert "no app 'local_cwd://tether/nope-123'" in res.err
        assert res.err.count("\n") == 1


def test_describe_masks_secrets(tether: Callable[..., Result], finished_app: str) -> None:
    res = tether("describe", finished_app)
    assert res.code == 0
    doc = json.loads(res.out)
    role = doc["roles"][0]
    assert role["name"] == "sh" and role["num_replicas"] == 2
    assert role["env"]["API_TOKEN"] == "****"
    assert "tok-123456" not in res.out


def test_log_every_replica_prefixed_and_redacted(tether: Callable[..., Result],
                                                 finished_app: str) -> None:
    res = tether("log", finished_app)
    assert res.code == 0
    lines = res.out.splitlines()
    assert {"sh/0 out-0", "sh/0 err-0", "sh/1 out-1", "sh/1 err-1"} <= set(lines)
    assert "tok-123456" not in res.out and "sh/0 token=****" in lines


def test_log_selectors(tether: Callable[..., Result], finished_app: str) -> None:
    assert set(tether("log", f"{finished_app}/sh/1").out.splitlines()) == {
        "sh/1 out-1", "sh/1 err-1", "sh/1 token=****"}
    assert set(tether("log", "--role", "sh", "--replica", "0", finished_app).out.splitlines()
               ) == {"sh/0 out-0", "sh/0 err-0", "sh/0 token=****"}
    assert tether("log", "--regex", "^err", finished_app).out.splitlines().count("sh/0 err-0") == 1
    assert "out-0" not in tether("log", "--regex", "^err", finished_app).out
    stderr_only = tether("log", "--streams", "stderr", f"{finished_app}/sh/0").out
    assert stderr_only.splitlines() == ["sh/0 err-0"]
    assert tether("log", "--no-prefix", f"{finished_app}/sh/0").out.splitlines()[0] == "out-0"


def test_log_time_window(tether: Callable[..., Result], finished_app: str) -> None:
    assert tether("log", "--since", "1h", finished_app).out.count("\n") == 6
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert tether("log", "--since", future, finished_app).out == ""
    assert tether("log", "--until", "1h", finished_app).out == ""


def test_log_selector_errors(tether: Callable[..., Result], finished_app: str) -> None:
    res = tether("log", f"{finished_app}/nope")
    assert res.code == 1 and "has no role 'nope'; roles: sh" in res.err
    res = tether("log", f"{finished_app}/sh/5")
    assert res.code == 1 and "there is no replica 5" in res.err
    res = tether("log", "--since", "yesterday", finished_app)
    assert res.code == 1 and "cannot read time 'yesterday'" in res.err
    res = tether("log", "--regex", "(", finished_app)
    assert res.code == 1 and "not a valid regular expression" in res.err


def test_log_tail_follows_a_running_app(tether: Callable[..., Result]) -> None:
    handle = tether("run", "--detach", "utils.sh",
                    "for i in 1 2 3; do echo tick-$i; sleep 0.3; done").out.strip()
    res = tether("log", "--tail", handle)  # ends when the app ends (else the call times out)
    assert res.code == 0
    assert [ln for ln in res.out.splitlines() if "tick" in ln] == [
        "sh/0 tick-1", "sh/0 tick-2", "sh/0 tick-3"]


def test_list(tether: Callable[..., Result], finished_app: str) -> None:
    res = tether("list", "-s", "local_cwd")
    assert res.code == 0
    header, *rows = res.out.splitlines()
    assert header.split()[:3] == ["APP", "HANDLE", "STATE"]
    assert any(r.startswith(finished_app) and "SUCCEEDED" in r for r in rows)
    doc = json.loads(tether("list", "--json").out)
    assert [d["app_handle"] for d in doc] == [finished_app]


def test_delete(tether: Callable[..., Result], finished_app: str) -> None:
    res = tether("delete", finished_app)
    assert res.code == 0 and f"deleted {finished_app}" in res.out
    assert tether("status", finished_app).code == 1
    assert "no apps on local_cwd" in tether("list").out


def test_cancel_several_and_delete_a_running_app(tether: Callable[..., Result]) -> None:
    h1 = tether("run", "--detach", "utils.sh", "sleep 60").out.strip()
    h2 = tether("run", "--detach", "utils.sh", "sleep 60").out.strip()
    res = tether("cancel", h1, h2)
    assert res.code == 0 and f"cancelled {h1}" in res.out and f"cancelled {h2}" in res.out
    h3 = tether("run", "--detach", "utils.sh", "sleep 60").out.strip()
    assert tether("delete", h3).code == 0
    assert tether("status", h3).code == 1


def test_parse_time() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert parse_time("5m", now) == now - timedelta(minutes=5)
    assert parse_time("1.5h", now) == now - timedelta(hours=1.5)
    assert parse_time("2024-05-01T10:00:00+00:00") == now - timedelta(hours=2)
    with pytest.raises(CLIError):
        parse_time("soon")


def test_status_shows_the_failure_cause(tether: Callable[..., Result]) -> None:
    """A replica that exits 3: ``tether status`` says it is the application's failure."""
    res = tether("run", "utils.sh", "exit 3")
    handle = res.out.splitlines()[0]
    res = tether("status", handle)
    assert "State: FAILED" in res.out
    assert "Cause: application, exit code 3" in res.out
    doc = json.loads(tether("status", "--json", handle).out)
    assert doc["failure"]["cause"] == "application" and doc["failure"]["exit_code"] == 3
    assert doc["roles"][0]["replicas"][0]["failure"]["cause"] == "application"


def test_runner_and_tether_status_show_a_running_jobs_report(
        tmp_path: Path, tether: Callable[..., Result]) -> None:
    gate = tmp_path / "gate"
    code = ("import os, sys, time; from tether.runtime import report; "
            "report(step=2, total=8, loss=0.25); "
            f"[time.sleep(0.05) for _ in iter(lambda: os.path.exists({str(gate)!r}), True)]")
    app = AppDef("reporting", [Role("r", image="", entrypoint=sys.executable, args=["-c", code])])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        try:
            seen = None
            for _ in range(3000):  # a hang guard; the job waits for the gate meanwhile
                seen = runner.progress(handle)
                if seen is not None:
                    break
                status = runner.status(handle)
                assert status is not None and not status.is_terminal(), status
                time.sleep(0.1)
            assert seen is not None and seen.format().startswith("2/8 (25%) loss=0.25")
            res = tether("status", handle)
            assert res.code == 0 and "  progress: 2/8 (25%) loss=0.25" in res.out
            doc = json.loads(tether("status", "--json", handle).out)
            assert doc["state"] == "RUNNING" and doc["progress"]["step"] == 2
        finally:
            gate.touch()
        status = runner.wait(handle, wait_interval=0.1)
        assert status is not None and status.state == AppState.SUCCEEDED
