"""``tether runopts``: the run options (``-cfg``) of schedulers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tether.cli.cmd_base import SubCommand
from tether.cli.common import get_runner

if TYPE_CHECKING:
    from tether.specs import runopts


def format_runopts(opts: runopts) -> str:
    """Renders run options, one per line: name, type, default or ``required``, help.

    Args:
        opts: The options.

    Returns:
        The text (``(no options)`` when empty).
    """
    if not len(opts):
        return "    (no options)"
    lines: list[str] = []
    for name, opt in opts:
        if opt.is_required:
            dflt = "required"
        elif opt.default is None:
            dflt = "default: none"
        else:
            dflt = f"default: {opt.default}"
        lines.append(f"    {name} ({opt.type_name()}, {dflt})")
        if opt.help:
            lines.append(f"        {opt.help}")
    return "\n".join(lines)


class CmdRunopts(SubCommand):
    """Show the run options (-cfg) of one or every scheduler."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument("scheduler", nargs="?", default=None,
                               help="the scheduler (default: all)")

    def run(self, args: argparse.Namespace) -> None:
        with get_runner() as runner:
            if args.scheduler:
                opts = runner.scheduler_run_opts(args.scheduler)
                print(f"{args.scheduler}:")
                print(format_runopts(opts))
                return
            for name in runner.scheduler_backends():
                print(f"{name}:")
                try:
                    print(format_runopts(runner.scheduler_run_opts(name)))
                except ImportError as e:
                    print(f"    (not available: {e}; install the matching tether extra)")
                print()
