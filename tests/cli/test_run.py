"""``tether run`` end to end on local_cwd: waiting, logs, dry-runs, exit codes, errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result

REPO = Path(__file__).resolve().parents[2]


def handle_of(res: Result) -> str:
    return next(ln for ln in res.out.splitlines() if ln.startswith("local_cwd://"))


def test_run_on_local_streams_the_output_and_reports_success(
    tether: Callable[..., Result],
) -> None:
    res = tether("run", "utils.echo", "--msg", "hi")
    assert res.code == 0, res.err
    handle = handle_of(res)
    # the handle first, then the app's own output (one replica: no prefix), then the result
    assert res.out.splitlines() == [handle, "hi", f"{handle} SUCCEEDED"]
    # not a TTY: plain progress lines on stderr, no terminal control codes anywhere
    assert f"{handle}: SUCCEEDED" in res.err
    assert "\x1b" not in res.err + res.out


def test_run_on_local_prefixes_lines_when_there_are_several_replicas(
    tether: Callable[..., Result],
) -> None:
    res = tether("run", "utils.sh", "--num_replicas", "3", "echo line-$TETHER_REPLICA_ID")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert {"sh/0 line-0", "sh/1 line-1", "sh/2 line-2"} <= set(lines)


def test_failed_app_output_is_shown_and_exit_code_is_non_zero(
    tether: Callable[..., Result],
) -> None:
    res = tether("run", "utils.python", "-c",
                 "import sys; print('partial result'); print('boom', file=sys.stderr); "
                 "sys.exit(7)")
    assert res.code == 1
    assert "partial result" in res.out.splitlines() and "boom" in res.out.splitlines()


def test_failed_app_exit_code_and_status(tether: Callable[..., Result]) -> None:
    res = tether("run", "-s", "local_cwd", "utils.sh", "echo bad >&2; exit 3")
    assert res.code == 1
    assert res.out.strip().endswith("FAILED")
    assert "State: FAILED" in res.err and "(exitcode: 3)" in res.err


def test_run_log_streams_every_replica_prefixed(tether: Callable[..., Result]) -> None:
    res = tether("run", "--log", "utils.sh", "--num_replicas", "2",
                 "echo from-$TETHER_REPLICA_ID")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert "sh/0 from-0" in lines and "sh/1 from-1" in lines


def test_detach_prints_the_handle_and_returns_then_manage_the_app(
    tether: Callable[..., Result],
) -> None:
    res = tether("run", "--detach", "utils.sh", "echo started; sleep 60")
    assert res.code == 0, res.err
    handle = res.out.strip()
    # only the handle on stdout: the command did not wait for (or stream) the app
    assert res.out.splitlines() == [handle] and handle.startswith("local_cwd://")
    assert "launched" in res.err
    status = tether("status", handle)
    assert status.code == 0 and any(s in status.out for s in ("RUNNING", "PENDING", "SUBMITTED"))
    listed = tether("list", "-s", "local_cwd")
    assert handle in listed.out
    cancelled = tether("cancel", "--wait", handle)
    assert cancelled.code == 0 and f"{handle} CANCELLED" in cancelled.out
    again = tether("cancel", handle)
    assert "already finished (CANCELLED)" in again.out


def test_wait_flag_and_exit_code_follow_the_app(tether: Callable[..., Result]) -> None:
    res = tether("run", "--wait", "utils.python", "-c", "import sys; sys.exit(0)")
    assert res.code == 0


def test_dryrun_prints_app_and_request_and_masks_secrets(tether: Callable[..., Result]) -> None:
    res = tether("run", "--dryrun", "utils.sh", "--env", "HF_TOKEN=s3cr3t-value,PLAIN=ok",
                 "echo hi")
    assert res.code == 0, res.err
    assert "=== APPLICATION ===" in res.out and "=== SCHEDULER REQUEST ===" in res.out
    assert "s3cr3t-value" not in res.out
    assert '"PLAIN": "ok"' in res.out and '"HF_TOKEN": "****"' in res.out
    # nothing was submitted
    assert "no apps on local_cwd" in tether("list").out


def test_component_help(tether: Callable[..., Result]) -> None:
    res = tether("run", "dist.ddp", "--help")
    assert res.code == 0
    assert res.out.startswith("usage: tether run dist.ddp")
    assert "[{min_nnodes}:]{nnodes}x{nproc_per_node}" in res.out
    # --help after the app's first argument, or after --, belongs to the app
    res = tether("run", "--dryrun", "utils.python", "--script", "a.py", "x", "--help")
    assert res.code == 0 and '"--help"' in res.out
    res = tether("run", "--dryrun", "utils.python", "--script", "a.py", "--", "--help")
    assert res.code == 0 and '"--help"' in res.out


def test_wrong_component_argument_prints_usage_and_reason(tether: Callable[..., Result]) -> None:
    res = tether("run", "dist.ddp", "-j", "2", "--script", "t.py")
    assert res.code == 1
    assert "usage: tether run dist.ddp" in res.err
    assert "-j '2' has no x{nproc_per_node}" in res.err
    res = tether("run", "utils.echo", "--msgg", "x")  # argparse's exit code, as TorchX
    assert res.code == 2 and "unrecognized argument '--msgg'; did you mean --msg" in res.err


def test_missing_required_component_argument_exits_2_with_usage(
    tether: Callable[..., Result],
) -> None:
    res = tether("run", "--dryrun", "utils.copy", "--src", "a")
    assert res.code == 2, res
    assert "usage: tether run utils.copy" in res.err and "--dst" in res.err


def test_options_after_the_component_are_its_arguments(tether: Callable[..., Result]) -> None:
    res = tether("run", "utils.echo", "--dryrun")
    assert res.code == 2 and "unrecognized argument '--dryrun'" in res.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run"], "missing the component to run"),
        (["run", "--wait", "--detach", "utils.echo"], "cannot be combined"),
        (["run", "-s", "nope", "utils.echo"], "unknown scheduler 'nope'"),
        (["run", "-cfg", "bogus=1", "utils.echo"], "unknown run option 'bogus'"),
        (["run", "--workspace", "/no/such/dir", "utils.echo"], "does not exist"),
    ],
)
def test_run_user_errors(tether: Callable[..., Result], argv: list[str], message: str) -> None:
    res = tether(*argv)
    assert res.code == 1, res
    assert message in res.err and "Traceback" not in res.err


def test_component_defaults_from_tetherconfig(tether: Callable[..., Result],
                                              project: Path) -> None:
    (project / ".tetherconfig").write_text("[component:utils.echo]\nmsg = from the config\n")
    res = tether("run", "--dryrun", "utils.echo")
    assert '"from the config"' in res.out
    res = tether("run", "--dryrun", "utils.echo", "--msg", "cli wins")
    assert '"cli wins"' in res.out
    res = tether("run", "utils.echo", "--help")
    assert "(default from .tetherconfig: from the config)" in " ".join(res.out.split())


def test_file_component_from_the_project(tether: Callable[..., Result], project: Path) -> None:
    (project / "comps.py").write_text(
        "from tether.specs import AppDef, Role\n\n"
        "def hello(who: str) -> AppDef:\n"
        "    '''Says hello.\n\n    Args:\n        who: Whom to greet.\n    '''\n"
        "    return AppDef(name='hello', roles=[Role(name='hi', entrypoint='echo',\n"
        "                                            args=['hello', who])])\n"
    )
    res = tether("run", "--log", "comps.py:hello", "--who", "file")
    assert res.code == 0, res.err
    assert "hello file" in res.out.splitlines()


def test_cancelled_app_exit_code_3(tether_proc: Callable[..., Result], project: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "utils.sh", "sleep 60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a terminal's foreground job has SIGINT at its default; the suite itself may have
        # been started in the background (nohup, &), where it is inherited as ignored
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None
    handle = proc.stdout.readline().strip()
    assert handle.startswith("local_cwd://")
    assert tether_proc("cancel", handle).code == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert f"{handle} CANCELLED" in out


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_waiting_on_local_cancels_the_app(tether_proc: Callable[..., Result]
                                                       ) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "utils.sh", "sleep 60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a terminal's foreground job has SIGINT at its default; the suite itself may have
        # been started in the background (nohup, &), where it is inherited as ignored
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None
    handle = proc.stdout.readline().strip()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "cancelling" in err and "Traceback" not in err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = tether_proc("status", handle)
        if "CANCELLED" in status.out:
            break
        time.sleep(0.5)
    assert "State: CANCELLED" in status.out


def test_an_inherited_ignored_sigint_stays_ignored(tether_proc: Callable[..., Result]) -> None:
    # A background job (`cmd &` in a script, nohup) starts with SIGINT ignored so that a
    # Ctrl-C meant for the foreground job does not reach it; `tether run` keeps that choice
    # (as Python and every POSIX tool do) instead of turning it back into "cancel the app".
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "utils.sh", "sleep 60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    handle = proc.stdout.readline().strip()
    assert handle.startswith("local_cwd://")
    try:
        proc.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)  # still waiting on the app: the signal was ignored
        state = tether_proc("status", handle).out
        assert not any(s in state for s in ("CANCELLED", "FAILED", "SUCCEEDED")), state
    finally:
        assert tether_proc("cancel", handle).code == 0
        proc.communicate(timeout=60)
    assert proc.returncode == 3


@pytest.mark.slow
def test_demo_ddp_two_ranks_on_local_cwd(tether: Callable[..., Result]) -> None:
    """What `make demo` runs: a real 1x2 DDP job, logs from both ranks, SUCCEEDED."""
    script = REPO / "examples" / "apps" / "train_ddp.py"
    res = tether("run", "--log", "-s", "local_cwd", "dist.ddp", "-j", "1x2",
                 "--script", str(script), "--", "--epochs", "2")
    assert res.code == 0, res.out + res.err
    # one replica (torchrun starts the two ranks): lines without a role/replica prefix
    lines = res.out.splitlines()
    assert any(ln.startswith("[train_ddp0]:rank 0: done") for ln in lines), res.out
    assert any(ln.startswith("[train_ddp1]:rank 1: done") for ln in lines), res.out
    assert res.out.splitlines()[-1].endswith(" SUCCEEDED")
    assert os.environ["PATH"]  # the job used this venv's python (see conftest)
    # rank 0 reported each epoch (tether.runtime.report): the last report is the job's end
    from tether.runner import get_runner

    with get_runner() as runner:
        last = runner.progress(res.out.splitlines()[-1].split()[0])
    assert last is not None and (last.step, last.total) == (2, 2), last
    assert set(last.metrics) == {"epoch", "loss"} and last.eta_s == 0.0


def test_progress_on_a_terminal_is_one_redrawn_line(project: Path) -> None:
    """stderr on a real pseudo-terminal: the status line is redrawn in place, stdout stays plain."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "utils.sh", "sleep 1; echo done"],
        stdout=subprocess.PIPE, stderr=slave, text=True,
    )
    os.close(slave)
    out, _ = proc.communicate(timeout=120)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = b"".join(chunks).decode()
    assert proc.returncode == 0, err
    assert "\r\x1b[2K" in err and "RUNNING" in err
    assert out.splitlines()[1:] == ["done", out.splitlines()[0] + " SUCCEEDED"]
    assert "\x1b" not in out


def test_run_reads_a_nested_generic_argument(tether: Callable[..., Result],
                                             tmp_path: Path) -> None:
    path = tmp_path / "comp.py"
    path.write_text(
        "from tether.specs import AppDef, Role\n\n"
        "def trainer(args_by_role: dict[str, list[str]]) -> AppDef:\n"
        "    return AppDef('t', [Role(n, image='/tmp', entrypoint='echo', args=a)\n"
        "                        for n, a in args_by_role.items()])\n")
    res = tether("run", "--dryrun", f"{path}:trainer", "--args_by_role", "w=--lr;0.1,ps=--x")
    assert res.code == 0, res.err
    assert "--lr" in res.out and "0.1" in res.out and "--x" in res.out
