"""``tether describe``: the AppDef of a launched app."""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, add_handle_argument, check_handle, format_app, get_runner


class CmdDescribe(SubCommand):
    """Show the definition of a launched app (secret env values masked)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        add_handle_argument(subparser)

    def run(self, args: argparse.Namespace) -> None:
        handle = check_handle(args.app_handle)
        with get_runner() as runner:
            app = runner.describe(handle)
        if app is None:
            raise CLIError(f"no app {handle!r}: the scheduler does not know it "
                           "(`tether list -s SCHEDULER` shows the apps it knows)")
        print(format_app(app))
