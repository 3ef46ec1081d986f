"""``tether delete``: cancel apps and remove what the scheduler keeps of them."""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, add_handle_argument, check_handle, get_runner


class CmdDelete(SubCommand):
    """Delete apps: cancel them if running and remove their records and logs."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        add_handle_argument(subparser, many=True)

    def run(self, args: argparse.Namespace) -> None:
        handles = [check_handle(h) for h in args.app_handle]
        with get_runner() as runner:
            missing = [h for h in handles if runner.status(h) is None]
            if missing:
                raise CLIError(f"no app {missing[0]!r}: the scheduler does not know it "
                               "(`tether list -s SCHEDULER` shows the apps it knows)")
            for handle in handles:
                runner.delete(handle)
                print(f"deleted {handle}")
