"""``tether``: run and manage ML jobs from the command line.

Built-in subcommands are listed in :data:`BUILTIN_COMMANDS`; plugins add more through the
entry-point group ``tether.cli.cmds`` (a plugin that reuses a built-in name is ignored with a
warning). Only the chosen command's module is imported: the others appear in ``tether --help``
with their one-line summary (:data:`BUILTIN_SUMMARIES`).

User mistakes print one line on stderr and exit 1 (2 for command-line usage errors);
``--debug`` (or ``TETHER_DEBUG=1``) shows the traceback instead. Start-up is kept short:
importing this module and ``tether --help`` import no scheduler backend, no torch, no cloud
SDK and not ``importlib.metadata`` (entry points come from :mod:`tether.util.entry_points`'
cache).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from tether.cli.cmd_base import SubCommand
from tether.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, CLIError, eprint

TYPE_CHECKING = False  # `typing` is not imported at start-up (annotations are not evaluated)
if TYPE_CHECKING:
    from typing import Any

    from tether.util.entry_points import EntryPointLike

ENTRY_POINT_GROUP = "tether.cli.cmds"

BUILTIN_COMMANDS: dict[str, str] = {
    "builtins": "tether.cli.cmd_builtins:CmdBuiltins",
    "run": "tether.cli.cmd_run:CmdRun",
    "status": "tether.cli.cmd_status:CmdStatus",
    "wait": "tether.cli.cmd_wait:CmdWait",
    "describe": "tether.cli.cmd_describe:CmdDescribe",
    "log": "tether.cli.cmd_log:CmdLog",
    "list": "tether.cli.cmd_list:CmdList",
    "cancel": "tether.cli.cmd_cancel:CmdCancel",
    "delete": "tether.cli.cmd_delete:CmdDelete",
    "runopts": "tether.cli.cmd_runopts:CmdRunopts",
    "configure": "tether.cli.cmd_configure:CmdConfigure",
    "tracker": "tether.cli.cmd_tracker:CmdTracker",
}
"""Built-in subcommands: name -> ``module:Class``."""

BUILTIN_SUMMARIES: dict[str, str] = {
    "builtins": "List the registered components (builtins and entry points).",
    "run": "Run a component (`tether builtins` lists them) on a scheduler.",
    "status": "Show the status of an app (state, restarts, every replica).",
    "wait": "Wait until an app finishes; exit 0 SUCCEEDED, 1 FAILED, 3 CANCELLED.",
    "describe": "Show the definition of a launched app (secret env values masked).",
    "log": "Print the logs of an app's replicas (HANDLE[/ROLE[/REPLICA,...]]).",
    "list": "List the apps launched on a scheduler, oldest first.",
    "cancel": "Cancel apps (finished apps are left alone).",
    "delete": "Delete apps: cancel them if running and remove their records and logs.",
    "runopts": "Show the run options (-cfg) of one or every scheduler.",
    "configure": "Write a .tetherconfig with the required (or all) run options of schedulers.",
    "tracker": "Query tracked runs: jobs, metadata, artifacts and lineage.",
}
"""The one-line help of each built-in command, shown without importing its module (a test
checks that each equals the command's own summary)."""

_USER_ERRORS: tuple[type[BaseException], ...] = (
    CLIError,
    ValueError,
    KeyError,
    LookupError,
    FileNotFoundError,
    PermissionError,
    ImportError,
    TypeError,
)


def _load(target: str) -> type[SubCommand]:
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, SubCommand)):
        raise CLIError(f"{target} is not a tether.cli.cmd_base.SubCommand subclass")
    return cls


def plugin_commands(
    eps: Sequence[EntryPointLike] | None = None, warn: bool = True
) -> dict[str, EntryPointLike]:
    """The plugin commands of the ``tether.cli.cmds`` group that do not clash.

    A plugin that reuses a built-in command's name is ignored, with a warning on stderr:
    plugins cannot replace built-in commands.

    Args:
        eps: Entry points to consider (default: the installed ones).
        warn: Print the clash warnings.

    Returns:
        Command name to entry point.
    """
    if eps is None:
        from tether.util.entry_points import entry_points

        eps = entry_points(group=ENTRY_POINT_GROUP)
    found: dict[str, EntryPointLike] = {}
    for ep in eps:
        if ep.name in BUILTIN_COMMANDS:
            if warn:
                eprint(
                    f"tether: warning: ignoring plugin command {ep.name!r} ({ep.value}) from the "
                    f"{ENTRY_POINT_GROUP!r} entry points: {ep.name!r} is a built-in command; "
                    "register the plugin under another name"
                )
            continue
        if ep.name in found and warn:
            eprint(
                f"tether: warning: plugin command {ep.name!r} is registered twice "
                f"({found[ep.name].value} and {ep.value}); using {ep.value}"
            )
        found[ep.name] = ep
    return found


def _chosen_command(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The first argument that names a command (global options come before it)."""
    skip_next = False
    for tok in argv:
        if skip_next:
            skip_next = False
            continue
        if tok in ("--log_level", "--log-level"):
            skip_next = True
            continue
        if tok.startswith("-"):
            continue
        return tok if tok in names else None
    return None


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"tether {_version()}")
        parser.exit()


def _add_command(sub: Any, name: str, cmd: SubCommand) -> SubCommand:
    sp = sub.add_parser(name, help=cmd.summary(), description=cmd.summary(), allow_abbrev=False)
    cmd.add_arguments(sp)
    return cmd


def create_parser(
    argv: Sequence[str] = (),
    plugins: dict[str, EntryPointLike] | None = None,
    all_commands: bool = False,
) -> tuple[argparse.ArgumentParser, dict[str, SubCommand]]:
    """Builds the ``tether`` parser.

    Only the chosen command (the first argument naming one) gets its full parser; the others
    are listed with their summary, without importing their modules, and only where the
    listing can be shown (no command chosen, or ``--help`` before it).

    Args:
        argv: The arguments (to find which command must be imported).
        plugins: Plugin commands (default: the installed ones).
        all_commands: Build every built-in command's full parser (for the CLI reference).

    Returns:
        The parser and the commands it dispatches to, by name.
    """
    plugins = plugin_commands() if plugins is None else plugins
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Define ML jobs once as components, run them on any scheduler.",
        epilog="Run `tether COMMAND --help` for a command's options.",
        allow_abbrev=False,
    )
    parser.add_argument("--debug", action="store_true",
                        default=os.environ.get("TETHER_DEBUG", "") not in ("", "0", "false"),
                        help="show tracebacks of errors")
    parser.add_argument("--log_level", "--log-level", default=os.environ.get("LOGLEVEL", ""),
                        help="Python logging level of tether's messages (default WARNING)")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    commands: dict[str, SubCommand] = {}
    chosen = _chosen_command(argv, [*BUILTIN_COMMANDS, *plugins])
    # the other commands are listed only where they can be shown (`tether --help`, an
    # error): parsing dispatches on the chosen one alone, and each entry costs a parser
    listed = all_commands or chosen is None or bool(
        {"-h", "--help"} & set(argv[: list(argv).index(chosen)])
    )
    for name, target in BUILTIN_COMMANDS.items():
        if all_commands or name == chosen:
            commands[name] = _add_command(sub, name, _load(target)())
        elif listed:
            sub.add_parser(name, help=BUILTIN_SUMMARIES.get(name, ""), add_help=False)
    for name, ep in plugins.items():
        if name != chosen and not listed:
            continue
        if name == chosen:
            try:
                cls = _load(ep.value)
            except CLIError:
                raise
            except Exception as e:
                raise CLIError(
                    f"cannot load plugin command {name!r} ({ep.value}): {type(e).__name__}: {e}"
                ) from e
            commands[name] = _add_command(sub, name, cls())
        else:
            sub.add_parser(name, help=f"(plugin: {ep.value})", add_help=False)
    return parser, commands


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tether")
    except Exception:
        return "unknown"


def _apply_cli_defaults(
    parser: argparse.ArgumentParser, command: str, argv: Sequence[str]
) -> None:
    """Uses ``[cli:<command>]`` of ``.tetherconfig`` as defaults of the command's flags."""
    from tether.config import load_config

    section = load_config().cli_defaults(command)
    if not section:
        return
    sub = next(
        (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
    )
    if sub is None or command not in sub.choices:
        return
    sp = sub.choices[command]
    by_dest = {a.dest: a for a in sp._actions}
    defaults: dict[str, object] = {}
    for key, raw in section.items():
        action = by_dest.get(key) or by_dest.get(key.replace("-", "_"))
        if action is None or not action.option_strings:
            allowed = sorted(a.dest for a in sp._actions if a.option_strings and a.dest != "help")
            raise CLIError(
                f"[cli:{command}] in .tetherconfig: {key!r} is not an option of `tether "
                f"{command}` (allowed: {', '.join(allowed)})"
            )
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise CLIError(f"[cli:{command}] {key} = {raw!r}: expected true or false")
            defaults[action.dest] = low in ("true", "1", "yes")
        else:
            defaults[action.dest] = action.type(raw) if callable(action.type) else raw
    sp.set_defaults(**defaults)


def _configure_logging(level: str) -> None:
    import logging

    name = (level or "WARNING").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        raise CLIError(f"--log_level {level!r} is not a logging level (DEBUG, INFO, WARNING...)")
    logging.basicConfig(level=numeric, format="tether %(levelname)s: %(message)s",
                        stream=sys.stderr)


def _is_setup_error(e: BaseException) -> bool:
    """A backend that cannot be reached or is not set up: the user's to fix, told in one line
    (the message names the server and the configuration)."""
    from tether.errors import BackendError  # imports nothing

    return isinstance(e, BackendError) and e.kind == "connection"


def _one_line(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str):
        msg = e.args[0]
    else:
        msg = str(e) or type(e).__name__
    if isinstance(e, ImportError) and getattr(e, "name", None):
        msg += (" (a scheduler or feature needs an optional package: try "
                "`pip install 'tether[all]'`)")
    return msg


def main(argv: Sequence[str] | None = None) -> None:
    """The ``tether`` console script.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Raises:
        SystemExit: With the command's exit code.
    """
    if argv is not None:
        _main(list(argv))
        return
    try:
        _main(sys.argv[1:])
    finally:
        # the console script's process ends now: take what it allocated out of the cyclic
        # collector's sight, so the interpreter's teardown does not walk it all once more
        # (about 6% of a local dryrun); the process's exit returns the memory anyway
        import gc

        gc.freeze()


def _main(argv: list[str]) -> None:
    first_cmd = next((i for i, t in enumerate(argv) if not t.startswith("-")), len(argv))
    debug = "--debug" in argv[:first_cmd]
    debug = debug or os.environ.get("TETHER_DEBUG", "") not in ("", "0", "false")
    try:
        parser, commands = create_parser(argv)
        chosen = _chosen_command(argv, list(commands))
        if chosen is not None:
            _apply_cli_defaults(parser, chosen, argv)
        args = parser.parse_args(argv)
        debug = bool(args.debug)
        _configure_logging(args.log_level)
        if not args.command:
            parser.print_help()
            sys.exit(EXIT_FAILED)
        commands[args.command].run(args)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        eprint("tether: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # `tether log ... | head`: the reader went away; not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        finally:
            sys.exit(0)
    except Exception as e:
        if debug:
            import traceback

            traceback.print_exc()
        code = e.code if isinstance(e, CLIError) else EXIT_FAILED
        if isinstance(e, _USER_ERRORS) or _is_setup_error(e):
            eprint(f"tether: error: {_one_line(e)}")
        else:
            eprint(
                f"tether: error: {type(e).__name__}: {_one_line(e)}"
                + ("" if debug else " (run `tether --debug ...` for the traceback)")
            )
        sys.exit(code)
    sys.exit(0)


if __name__ == "__main__":
    main()
