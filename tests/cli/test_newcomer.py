"""Mistakes a newcomer makes in the first days, typed as a user types them.

Each test runs the ``tether`` console script's code as a separate process (real local jobs,
real files) and checks what the user reads and the exit code.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result
from tether.specs import parse_app_handle

TetherProc = Callable[..., Result]


def test_the_handle_error_shows_a_handle_shaped_like_real_ones(tether_proc: TetherProc) -> None:
    ran = tether_proc("run", "utils.echo", "--msg", "hi")
    assert ran.code == 0, ran.err
    real = parse_app_handle(ran.out.splitlines()[0])

    bad = tether_proc("status", "echo-12345678")
    assert bad.code != 0 and "Traceback" not in bad.err
    example = re.search(r"e\.g\. (\S+)", bad.err)
    assert example, bad.err
    shown = parse_app_handle(example.group(1))
    assert (shown.scheduler_backend, shown.session_name) == (
        real.scheduler_backend, real.session_name)
    # an app id is the app's name, a dash and a random suffix of the same length
    _name, _, suffix = real.app_id.rpartition("-")
    assert re.fullmatch(rf"[a-z0-9]+-[a-z0-9]{{{len(suffix)}}}", shown.app_id), shown.app_id


def test_run_options_after_the_component_get_a_hint_with_the_fixed_command(
    tether_proc: TetherProc,
) -> None:
    res = tether_proc("run", "utils.echo", "--msg", "hi", "-s", "kubernetes")
    assert res.code != 0 and "Traceback" not in res.err
    assert "unrecognized argument '-s'" in res.err
    assert "`tether run -s kubernetes utils.echo --msg hi`" in res.err

    res = tether_proc("run", "utils.echo", "--msg", "hi", "--dryrun")
    assert "`tether run --dryrun utils.echo --msg hi`" in res.err


def test_the_default_image_warning_names_only_what_tether_run_accepts(
    tether_proc: TetherProc,
) -> None:
    res = tether_proc("run", "--dryrun", "-s", "kubernetes", "utils.echo", "--msg", "hi")
    assert res.code == 0, res.err
    (warning,) = [line for line in res.err.splitlines() if "default image" in line]
    assert "$TETHER_IMAGE" in warning
    assert "--image" not in warning


def test_a_component_file_imports_a_module_next_to_it(
    tether_proc: TetherProc, tmp_path: Path
) -> None:
    pkg = tmp_path / "mycomps"
    pkg.mkdir()
    (pkg / "helpers.py").write_text("GREETING = 'hello from a helper'\n")
    (pkg / "comp.py").write_text(textwrap.dedent('''\
        import helpers
        import tether.specs as specs


        def greet() -> specs.AppDef:
            """Says hello."""
            return specs.AppDef("greet", roles=[specs.Role(
                "greet", image="unused", entrypoint="echo", args=[helpers.GREETING])])
        '''))
    # run from another directory, with nothing on PYTHONPATH but what tether needs
    res = tether_proc("run", f"{pkg}/comp.py:greet")
    assert res.code == 0, res.err
    assert "hello from a helper" in res.out.splitlines()


def _detached(tether_proc: TetherProc, *command: str) -> str:
    res = tether_proc("run", "--detach", "utils.sh", *command)
    assert res.code == 0, res.err
    return res.out.strip()


def test_wait_exits_with_the_apps_result(tether_proc: TetherProc) -> None:
    ok = _detached(tether_proc, "true")
    failed = _detached(tether_proc, "exit 7")
    res = tether_proc("wait", ok)
    assert (res.code, res.out.strip()) == (0, f"{ok} SUCCEEDED"), res.err
    res = tether_proc("wait", failed)
    assert (res.code, res.out.strip()) == (1, f"{failed} FAILED"), res.err
    assert "Traceback" not in res.err

    sleeper = _detached(tether_proc, "sleep 600")
    assert tether_proc("cancel", sleeper).code == 0
    res = tether_proc("wait", sleeper)
    assert (res.code, res.out.strip()) == (3, f"{sleeper} CANCELLED"), res.err

    res = tether_proc("wait", "local_cwd://tether/nosuch-12345678")
    assert res.code == 1 and "no app" in res.err and "Traceback" not in res.err


def test_status_help_says_what_its_exit_code_means(tether_proc: TetherProc) -> None:
    res = tether_proc("status", "--help")
    assert res.code == 0
    text = " ".join(res.out.split())
    assert "Exit code: 0 when the scheduler reported the app's status" in text
    assert "tether wait" in text


def test_list_filters_by_state_and_limit_and_delete_prunes_finished(
    tether_proc: TetherProc,
) -> None:
    first_ok = _detached(tether_proc, "true")
    failed = _detached(tether_proc, "false")
    last_ok = _detached(tether_proc, "true")
    for handle in (first_ok, failed, last_ok):
        tether_proc("wait", handle)
    running = _detached(tether_proc, "sleep 600")
    try:
        res = tether_proc("list", "--state", "succeeded", "--limit", "1")
        assert res.code == 0, res.err
        assert last_ok in res.out and first_ok not in res.out and failed not in res.out

        res = tether_proc("list", "--state", "FAILED,RUNNING")
        assert failed in res.out and running in res.out and first_ok not in res.out

        res = tether_proc("list", "--state", "fialed")
        assert res.code == 1 and "did you mean FAILED?" in res.err

        res = tether_proc("delete", "--finished")
        assert res.code == 0, res.err
        assert sorted(res.out.split()) == sorted(
            ["deleted", first_ok, "deleted", failed, "deleted", last_ok])
        res = tether_proc("list")
        assert running in res.out
        assert not {first_ok, failed, last_ok} & set(res.out.split())
    finally:
        tether_proc("cancel", running)


def test_ddp_with_a_missing_script_fails_at_dryrun_on_local_cwd(
    tether_proc: TetherProc, project: Path
) -> None:
    for argv in (["run", "--dryrun"], ["run"]):
        res = tether_proc(*argv, "dist.ddp", "-j", "1x1", "--script", "nosuch.py")
        assert res.code == 1 and "Traceback" not in res.err
        assert f"nosuch.py is not in {project}" in res.err, res.err
    assert "nosuch" not in tether_proc("list").out  # nothing was submitted
    # elsewhere the script is the image's: not checked here
    res = tether_proc("run", "--dryrun", "-s", "kubernetes", "dist.ddp", "--script", "nosuch.py")
    assert res.code == 0, res.err


def test_a_torchrun_failure_summary_shows_the_workers_last_lines_once(
    tether_proc: TetherProc, project: Path
) -> None:
    (project / "train.py").write_text(
        "import sys\nprint('starting', flush=True)\n"
        "print('boom: bad learning rate', file=sys.stderr)\nsys.exit(3)\n")
    res = tether_proc("run", "dist.ddp", "-j", "1x1", "--script", "train.py", timeout=300)
    assert res.code == 1, res.err
    assert " ".join(res.err.split()).count("boom: bad learning rate") == 1, res.err
    assert "Root Cause" not in res.err and "ChildFailedError" not in res.err, res.err


def _kubeconfig(path: Path, port: int) -> Path:
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        current-context: dead
        clusters:
        - name: dead
          cluster: {{server: "https://127.0.0.1:{port}"}}
        contexts:
        - name: dead
          context: {{cluster: dead, user: u}}
        - name: spare
          context: {{cluster: dead, user: u}}
        users:
        - name: u
          user: {{token: not-a-secret}}
        """))
    return path


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # nothing listens on it once closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HANDLE = "kubernetes://tether/default:train-abc123"


def test_an_unreachable_cluster_is_an_error_naming_server_and_kubeconfig(
    tether_proc: TetherProc, tmp_path: Path
) -> None:
    port = _closed_port()
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", port)
    for command in (["status", HANDLE], ["log", HANDLE], ["list", "-s", "kubernetes"]):
        res = tether_proc(*command, env={"KUBECONFIG": str(kubeconfig)})
        assert res.code == 1, (command, res.out, res.err)
        assert (f"cannot reach the Kubernetes apiserver at https://127.0.0.1:{port} "
                f"(kubeconfig {kubeconfig}, context dead)") in res.err, res.err
        assert "Retrying" not in res.err and "Traceback" not in res.err
        assert "UNKNOWN" not in res.out and "has no replicas" not in res.err


def test_a_missing_kubeconfig_or_context_says_so_with_cli_hints(
    tether_proc: TetherProc, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    res = tether_proc("status", HANDLE, env={"KUBECONFIG": str(missing)})
    assert res.code == 1
    assert f"{missing} ($KUBECONFIG) does not exist" in res.err, res.err
    assert "scheduler_params" not in res.err

    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", _closed_port())
    config = tmp_path / "ctx.tetherconfig"
    config.write_text("[kubernetes]\ncontext = gpu\n")
    res = tether_proc("status", HANDLE,
                      env={"KUBECONFIG": str(kubeconfig), "TETHERCONFIG": str(config)})
    assert res.code == 1
    assert "has no context 'gpu'; its contexts: dead, spare" in res.err, res.err
    assert "-cfg context=NAME" in res.err and "scheduler_params" not in res.err


def test_kubeconfig_set_in_process_after_import_is_the_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes.config  # noqa: F401  (imported before $KUBECONFIG is set)

    from tether.schedulers.kubernetes.client import KubernetesUnreachableError
    from tether.schedulers.kubernetes.scheduler import create_scheduler

    port = _closed_port()
    kubeconfig = _kubeconfig(tmp_path / "late-kubeconfig", port)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    with pytest.raises(KubernetesUnreachableError) as info:
        create_scheduler("test").describe("default:train-abc123")
    assert f"127.0.0.1:{port} (kubeconfig {kubeconfig}, context dead)" in str(info.value)
