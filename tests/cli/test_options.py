"""runopts, configure, tracker and the progress display."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result
from tether.cli.progress import Progress
from tether.config import load_config
from tether.specs import AppState, AppStatus, ReplicaStatus, RoleStatus, runopts


def test_runopts_one_and_all(tether: Callable[..., Result]) -> None:
    res = tether("runopts", "local_cwd")
    assert res.code == 0
    assert res.out.startswith("local_cwd:\n")
    assert "grace_period (float, default: 5.0)" in res.out
    res = tether("runopts")
    assert res.code == 0 and "local_cwd:" in res.out and "kubernetes:" in res.out
    res = tether("runopts", "local_cdw")
    assert res.code == 1 and "unknown scheduler 'local_cdw'; did you mean local_cwd" in res.err
    assert "local_cwd" in res.err


def test_configure_writes_a_readable_file(tether: Callable[..., Result], project: Path) -> None:
    res = tether("configure", "-s", "local_cwd", "--all")
    assert res.code == 0 and "wrote" in res.out
    text = (project / ".tetherconfig").read_text()
    assert "[local_cwd]" in text and "grace_period = 5.0" in text
    assert "# log_dir =" in text  # no default: commented out
    cfg = load_config()
    assert cfg.section("local_cwd") == {"auto_set_cuda_visible_devices": "false",
                                        "grace_period": "5.0", "exit_with_launcher": "false",
                                        "prepend_cwd": "false"}
    # the written file is accepted by the scheduler
    assert tether("run", "--dryrun", "utils.echo").code == 0
    res = tether("configure", "-s", "local_cwd")
    assert res.code == 1 and "already exists; use --force" in res.err
    assert tether("configure", "-s", "local_cwd", "--force").code == 0
    assert "grace_period" not in (project / ".tetherconfig").read_text()


def test_configure_print_and_errors(tether: Callable[..., Result], project: Path) -> None:
    res = tether("configure", "--print")
    assert res.code == 0 and "[local_cwd]" in res.out and "[kubernetes]" in res.out
    assert not (project / ".tetherconfig").exists()
    res = tether("configure", "-s", "slurmm")
    assert res.code == 1 and "unknown scheduler 'slurmm'" in res.err


def test_configure_required_options_are_left_to_fill_in() -> None:
    from tether.cli.cmd_configure import render_section

    opts = runopts()
    opts.add("cluster", str, "Cluster to submit to.", required=True)
    opts.add("queue", str, "Queue.", default="default")
    text = render_section("mysched", opts, all_opts=False)
    assert text.splitlines() == [
        "[mysched]", "# Cluster to submit to.", "# required (str): uncomment and fill in",
        "# cluster =",
    ]


def test_tracker_without_configuration_is_a_clear_error(tether: Callable[..., Result]) -> None:
    res = tether("tracker", "list", "jobs")
    assert res.code == 1
    assert res.err.startswith("tether: error: no tracker configured")
    assert res.err.count("\n") == 1


def test_tracker_queries_runs_of_real_jobs(tether: Callable[..., Result], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TRACKERS", "fsspec")
    monkeypatch.setenv("TETHER_TRACKER_FSSPEC_CONFIG", str(tmp_path / "tracking"))
    code = ("from tether.tracker import AppRun; r = AppRun.run_from_env(); "
            "r.add_metadata(lr=0.1); r.add_artifact('model', '/models/m.pt')")
    parent = tether("run", "utils.python", "-c", code)
    assert parent.code == 0, parent.err
    parent_id = parent.out.splitlines()[0]
    child = tether("run", "--parent_run_id", parent_id, "utils.python", "-c", code)
    assert child.code == 0, child.err
    child_id = child.out.splitlines()[0]

    jobs = tether("tracker", "list", "jobs").out.splitlines()
    assert parent_id in jobs and child_id in jobs
    assert tether("tracker", "list", "jobs", "--parent-run-id", parent_id).out.splitlines() == [
        child_id]
    assert "lr: 0.1" in tether("tracker", "list", "metadata", parent_id).out
    arts = tether("tracker", "list", "artifacts", "--artifact", "model", parent_id)
    assert arts.out.strip() == "model: /models/m.pt"
    lineage = tether("tracker", "list", "lineage", child_id).out
    assert lineage.splitlines()[0] == child_id and parent_id in lineage
    res = tether("tracker", "list", "metadata", "local_cwd://tether/nope")
    assert res.code == 1 and "is not in tracker(s) fsspec" in res.err


def test_tracker_usage(tether: Callable[..., Result]) -> None:
    assert tether("tracker").code == 2
    assert tether("tracker", "list").code == 2
    assert tether("tracker", "list", "metadata").code == 2


def _status(state: AppState, *rep_states: AppState) -> AppStatus:
    reps = [ReplicaStatus(id=i, state=s, role="trainer") for i, s in enumerate(rep_states)]
    return AppStatus(state=state, roles=[RoleStatus("trainer", reps)])


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_line() -> None:
    out = _Tty()
    p = Progress("h://s/a", stream=out)
    p.update(_status(AppState.RUNNING, AppState.RUNNING, AppState.SUCCEEDED))
    p.update(_status(AppState.SUCCEEDED, AppState.SUCCEEDED, AppState.SUCCEEDED))
    p.clear()
    text = out.getvalue()
    assert "\n" not in text and text.count("\r\x1b[2K") == 3
    assert "RUNNING (trainer: 1 running, 1 succeeded) [00:00]" in text
    assert "SUCCEEDED (trainer: 2 succeeded)" in text


def test_progress_elsewhere_prints_a_line_per_change() -> None:
    out = io.StringIO()
    p = Progress("h://s/a", stream=out)
    for _ in range(3):
        p.update(_status(AppState.RUNNING, AppState.RUNNING))
    p.update(_status(AppState.SUCCEEDED, AppState.SUCCEEDED))
    assert out.getvalue().splitlines() == [
        "h://s/a: RUNNING (trainer: 1 running)",
        "h://s/a: SUCCEEDED (trainer: 1 succeeded)",
    ]
