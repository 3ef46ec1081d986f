"""``tether builtins``: the registered components."""

from __future__ import annotations

import argparse
import inspect

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, eprint


class CmdBuiltins(SubCommand):
    """List the registered components (builtins and entry points)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument(
            "--print", dest="print_component", metavar="COMPONENT",
            help="print the source code of a component (e.g. dist.ddp)",
        )
        subparser.add_argument(
            "--all", action="store_true",
            help="also list invalid components, with the reasons",
        )

    def run(self, args: argparse.Namespace) -> None:
        from tether.components.finder import discovery_problems, get_component, get_components

        if args.print_component:
            info = get_component(args.print_component)
            try:
                print(inspect.getsource(info.fn))
            except (OSError, TypeError) as e:
                raise CLIError(f"cannot read the source of {info.name}: {e}") from None
            return
        comps = get_components()
        valid = {n: c for n, c in comps.items() if c.is_valid}
        invalid = {n: c for n, c in comps.items() if not c.is_valid}
        print(f"Found {len(valid)} builtin components:")
        width = max((len(n) for n in valid), default=0)
        for i, (name, info) in enumerate(valid.items(), start=1):
            print(f"{i:>3}. {name:<{width}}  {info.description}".rstrip())
        if invalid:
            if args.all:
                print(f"\n{len(invalid)} invalid components:")
                for name, info in invalid.items():
                    print(f"  {name}:")
                    for err in info.validation_errors:
                        print(f"    {err}")
            else:
                eprint(f"tether: warning: {len(invalid)} registered functions are not valid "
                       f"components ({', '.join(invalid)}); `tether builtins --all` shows why")
        for problem in discovery_problems():
            eprint(f"tether: warning: {problem.message}")
