"""``tether configure``: write a ``.tetherconfig`` with the schedulers' run options."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, get_runner

if TYPE_CHECKING:
    from tether.specs import CfgVal, runopts

CONFIG_FILE = ".tetherconfig"


def _value_text(value: CfgVal) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}:{v}" for k, v in value.items())
    return "" if value is None else str(value)


def render_section(scheduler: str, opts: runopts, all_opts: bool) -> str:
    """One ``[scheduler]`` section: required options to fill in, and with ``all_opts`` the
    others with their defaults.

    Required options are written commented out (``# key =``), so the file stays valid and a
    forgotten value is reported by name instead of being read as an empty string.

    Args:
        scheduler: The scheduler's name.
        opts: Its run options.
        all_opts: Include the optional ones.

    Returns:
        The section's text.
    """
    lines = [f"[{scheduler}]"]
    for name, opt in opts:
        if not opt.is_required and not all_opts:
            continue
        if opt.help:
            lines.append(f"# {opt.help}")
        if opt.is_required:
            lines.append(f"# required ({opt.type_name()}): uncomment and fill in")
            lines.append(f"# {name} =")
        elif opt.default is None or _value_text(opt.default) == "":
            lines.append(f"# ({opt.type_name()}, default: none)")
            lines.append(f"# {name} =")
        else:
            lines.append(f"{name} = {_value_text(opt.default)}")
    if len(lines) == 1:
        lines.append("# (no required options; `tether configure --all` lists every option)")
    return "\n".join(lines) + "\n"


class CmdConfigure(SubCommand):
    """Write a .tetherconfig with the required (or all) run options of schedulers."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument(
            "-s", "--schedulers", default=None, metavar="NAME[,NAME2]",
            help="schedulers to configure (default: all)",
        )
        subparser.add_argument("-a", "--all", action="store_true",
                               help="write every option with its default, not only the "
                                    "required ones")
        subparser.add_argument("--print", dest="print_only", action="store_true",
                               help="print the configuration instead of writing the file")
        subparser.add_argument("--force", action="store_true",
                               help="overwrite an existing .tetherconfig")
        subparser.add_argument("--file", default=CONFIG_FILE,
                               help="file to write (default: ./.tetherconfig)")

    def run(self, args: argparse.Namespace) -> None:
        with get_runner() as runner:
            available = runner.scheduler_backends()
            names = [s.strip() for s in args.schedulers.split(",") if s.strip()] \
                if args.schedulers else available
            unknown = [n for n in names if n not in available]
            if unknown:
                raise CLIError(f"unknown scheduler {unknown[0]!r}; available: "
                               f"{', '.join(available)}")
            sections: list[str] = []
            for name in names:
                try:
                    opts = runner.scheduler_run_opts(name)
                except ImportError as e:
                    if args.schedulers:
                        raise
                    sections.append(f"# [{name}]: not available here ({e})\n")
                    continue
                sections.append(render_section(name, opts, args.all))
        text = ("# tether configuration: run options per scheduler (-cfg on the command line "
                "wins)\n\n" + "\n".join(sections))
        if args.print_only:
            print(text, end="")
            return
        if os.path.exists(args.file) and not args.force:
            raise CLIError(f"{args.file} already exists; use --force to overwrite it or "
                           "--print to see the configuration")
        tmp = f"{args.file}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, args.file)
        print(f"wrote {os.path.abspath(args.file)}")
