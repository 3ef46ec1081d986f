"""The ``tether`` entry point: help, speed (imports), errors, plugins and builtins."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Result
from tether.cli.common import CLIError
from tether.cli.main import BUILTIN_COMMANDS, create_parser, plugin_commands

HEAVY = (
    "torch", "kubernetes", "airflow", "prefect", "kfp", "boto3", "botocore", "mlflow",
    "fsspec", "ray",
)
"""Modules `tether --help` and `tether builtins` must not import."""


def _probe(argv: list[str], report: str, marker: str) -> Any:
    """Runs ``tether`` with ``argv`` in a new interpreter; ``report`` (code run after it)
    prints ``marker=<json>`` to stderr, whose value is returned."""
    code = (
        "import sys, json, dataclasses, enum\n"
        "from tether.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        + report
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith(f"{marker}="))
    return json.loads(line[len(marker) + 1:])


def imported_modules(*argv: str) -> set[str]:
    return set(_probe(list(argv), "print('MODULES=' + json.dumps(sorted(sys.modules)), "
                                  "file=sys.stderr)\n", "MODULES"))


@pytest.mark.parametrize("argv", [["--help"], ["builtins"], ["run", "--help"]])
def test_light_commands_import_no_backend_orchestrator_or_sdk(argv: list[str]) -> None:
    mods = imported_modules(*argv)
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY)
    assert not heavy, heavy
    backends = sorted(m for m in mods if m.startswith("tether.schedulers.")
                      and m.endswith("_scheduler"))
    assert not backends, backends
    if argv == ["--help"]:
        assert not [m for m in mods if m.startswith(("tether.runner", "tether.tracker",
                                                       "tether.components."))]


DRYRUN_UNUSED = {
    "asyncio", "tether.schedulers.watch", "uuid", "platform", "difflib",
    "tether.tracker.progress",
    # what a launched app, a job key or a recovering app needs (issue 32: the dry run must
    # not pay for them)
    "tether.runner.reattach", "tether.runner.events", "tether.runner.logs",
    "tether.runner.chains", "tether.runner.follow", "tether.runner.following",
    "tether.specs.recovery",
    "tether.specs.failures", "tether.specs.status", "tether.specs.status_format",
    "tether.schedulers.local.status",
    # an event nobody listens to (the null destination, no plugin of that name)
    "tether.runner.event_log",
    # a plugin search that skipped nothing; PEP 696 defaults, applied by Scheduler itself
    "tether.specs.plugin_errors", "typing_extensions",
}
"""Modules ``run --dryrun`` must not import (each costs every dry run its import)."""


def test_a_dryrun_loads_no_module_it_does_not_use() -> None:
    """Synchronous commands do not pay for asyncio (about 10 ms and 4 MiB at every start):
    only the async followers (an Airflow trigger) load it. Nor for the watch hub (only when
    an app is followed), uuid (platform), difflib (only for an error's hint), or what only a
    launched, re-attached or recovering app uses."""
    mods = imported_modules("run", "--dryrun", "-s", "local_cwd", "utils.echo", "--msg", "hi")
    assert "tether.runner" in mods
    assert not DRYRUN_UNUSED & mods, sorted(DRYRUN_UNUSED & mods)


DRYRUN_CLASSES = {
    "tether.components.finder.DiscoveryProblem", "tether.components.params.ComponentSpec",
    "tether.components.params.Param", "tether.config.TetherConfig",
    "tether.schedulers.api.DescribeAppResponse", "tether.schedulers.api.ListAppResponse",
    "tether.schedulers.capabilities.Capabilities", "tether.schedulers.capabilities.FollowMode",
    "tether.schedulers.capabilities.MountKind", "tether.schedulers.capabilities.Stream",
    "tether.schedulers.local.options.LocalOpts", "tether.schedulers.local.render.LocalRequest",
    "tether.schedulers.local.render.ReplicaRequest", "tether.specs.app.AppDef",
    "tether.specs.app.Role", "tether.specs.checks.Problem", "tether.specs.mounts.BindMount",
    "tether.specs.mounts.DeviceMount", "tether.specs.mounts.VolumeMount",
    "tether.specs.plugins.PluginSource", "tether.specs.plugins.PluginType",
    "tether.specs.resources.Resource", "tether.specs.runopts.StructuredOpts",
    "tether.specs.runopts.runopt", "tether.specs.secrets.SecretRef",
    "tether.specs.states.AppState", "tether.specs.states.RetryPolicy",
    "tether.specs.workspace.Workspace",
}
"""The dataclasses and enums (module level) of the modules ``run --dryrun`` imports.

Making one is the dearest thing an import does: a frozen dataclass compiles its generated
methods (3-6M instructions, 1-2% of a dry run), an enum about 0.6M. Issue 32 made
``AppIdRule``, ``Follow`` and ``Shortfall`` plain classes to bring the dry run back under its
cost before the redesign; one more on this path needs its cost weighed (measure it as
``benchmarks/`` says) before it joins this list."""


def test_a_dryrun_makes_only_the_dataclasses_and_enums_it_needs() -> None:
    report = (
        "made = [f'{n}.{a}' for n, m in list(sys.modules.items()) if n.startswith('tether.')\n"
        "        for a, o in vars(m).items() if isinstance(o, type) and o.__module__ == n\n"
        "        and (dataclasses.is_dataclass(o) or issubclass(o, enum.Enum))]\n"
        "print('CLASSES=' + json.dumps(sorted(made)), file=sys.stderr)\n"
    )
    argv = ["run", "--dryrun", "-s", "local_cwd", "utils.echo", "--msg", "hi"]
    made = set(_probe(argv, report, "CLASSES"))
    assert made, "the probe found no class at all"
    assert made <= DRYRUN_CLASSES, sorted(made - DRYRUN_CLASSES)


def test_help_lists_builtin_and_plugin_commands(tether: Callable[..., Result],
                                                test_plugin: None) -> None:
    res = tether("--help")
    assert res.code == 0
    for name in BUILTIN_COMMANDS:
        assert name in res.out
    assert "hello" in res.out and "tether_test_plugin.cli:CmdHello" in res.out


def test_no_command_prints_help_and_fails(tether: Callable[..., Result]) -> None:
    res = tether()
    assert res.code == 1 and "usage: tether" in res.out


def test_plugin_command_runs(tether: Callable[..., Result], test_plugin: None) -> None:
    res = tether("hello", "--name", "tests")
    assert (res.code, res.out) == (0, "hello tests from a plugin\n")


def test_plugin_cannot_replace_a_builtin_command(capsys: pytest.CaptureFixture[str]) -> None:
    eps = [
        EntryPoint("status", "tether_test_plugin.cli:CmdHello", "tether.cli.cmds"),
        EntryPoint("hello", "tether_test_plugin.cli:CmdHello", "tether.cli.cmds"),
    ]
    found = plugin_commands(eps)
    assert list(found) == ["hello"]
    err = capsys.readouterr().err
    assert "ignoring plugin command 'status'" in err and "built-in command" in err
    _, commands = create_parser(["status", "x"], plugins=found)
    assert type(commands["status"]).__module__ == "tether.cli.cmd_status"


def test_bad_plugin_class_is_a_clear_error(test_plugin: None) -> None:
    bad = {"bad": EntryPoint("bad", "tether_test_plugin.cli:NotACommand", "tether.cli.cmds")}
    with pytest.raises(CLIError, match=r"is not a tether\.cli\.cmd_base\.SubCommand subclass"):
        create_parser(["bad"], plugins=bad)
    # not loaded at all unless chosen
    _, commands = create_parser(["builtins"], plugins=bad)
    assert "bad" not in commands


def test_builtins(tether: Callable[..., Result], test_plugin: None) -> None:
    res = tether("builtins")
    assert res.code == 0
    assert res.out.startswith("Found ")
    for name in ("dist.ddp", "dist.spmd", "utils.echo", "utils.python", "serve.torchserve",
                 "metrics.tensorboard", "foo.baz.trainer"):
        assert f". {name} " in res.out
    res = tether("builtins", "--print", "utils.echo")
    assert res.code == 0 and res.out.startswith("def echo(")


def test_user_errors_are_one_line_without_traceback(tether_proc: Callable[..., Result]) -> None:
    res = tether_proc("run", "utils.ech")
    assert res.code == 1
    assert res.err.strip().splitlines() == [
        res.err.strip(),
    ] and res.err.startswith("tether: error: unknown component 'utils.ech'")
    assert "utils.echo" in res.err and "Traceback" not in res.err


def test_debug_shows_the_traceback(tether_proc: Callable[..., Result]) -> None:
    res = tether_proc("--debug", "run", "utils.ech")
    assert res.code == 1 and "Traceback (most recent call last)" in res.err
    res = tether_proc("run", "utils.ech", env={"TETHER_DEBUG": "1"})
    assert "Traceback" in res.err


def test_usage_errors_exit_2(tether: Callable[..., Result]) -> None:
    res = tether("status")
    assert res.code == 2 and "APP_HANDLE" in res.err
    res = tether("nosuchcommand")
    assert res.code == 2


def test_malformed_handle(tether: Callable[..., Result]) -> None:
    res = tether("status", "not-a-handle")
    assert res.code == 1
    assert "is not a valid app handle" in res.err and res.err.count("\n") == 1


def test_cli_defaults_from_tetherconfig(tether: Callable[..., Result], project: Path) -> None:
    (project / ".tetherconfig").write_text("[cli:run]\nscheduler = no_such_sched\n")
    res = tether("run", "--dryrun", "utils.echo")
    assert res.code == 1 and "unknown scheduler 'no_such_sched'" in res.err
    (project / ".tetherconfig").write_text("[cli:run]\nnot_an_option = 1\n")
    res = tether("run", "--dryrun", "utils.echo")
    assert res.code == 1 and "'not_an_option' is not an option of `tether run`" in res.err


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "tether"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("tether ")


def test_builtin_summaries_match_the_commands() -> None:
    """``tether --help`` lists commands without importing them: the summaries must not drift."""
    from tether.cli.main import BUILTIN_SUMMARIES, _load

    assert set(BUILTIN_SUMMARIES) == set(BUILTIN_COMMANDS)
    for name, target in BUILTIN_COMMANDS.items():
        assert BUILTIN_SUMMARIES[name] == _load(target)().summary(), name


def test_help_imports_no_command_module_and_no_metadata_scanner() -> None:
    mods = imported_modules("--help")
    assert not [m for m in mods if m.startswith("tether.cli.cmd_") and m != "tether.cli.cmd_base"]
    # on a warm entry-point cache (imported_modules ran `tether --help` before) no scan
    assert "importlib.metadata" not in imported_modules("--help")


def test_version_is_looked_up_only_when_asked(tether: Callable[..., Result]) -> None:
    res = tether("--version")
    assert res.code == 0 and res.out.startswith("tether ")
