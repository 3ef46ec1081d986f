"""``tether cancel``: stop apps."""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, add_handle_argument, check_handle, get_runner


class CmdCancel(SubCommand):
    """Cancel apps (finished apps are left alone)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        add_handle_argument(subparser, many=True)
        subparser.add_argument("--wait", action="store_true",
                               help="wait until the apps have stopped")

    def run(self, args: argparse.Namespace) -> None:
        handles = [check_handle(h) for h in args.app_handle]
        with get_runner() as runner:
            missing = [h for h in handles if runner.status(h) is None]
            if missing:
                raise CLIError(f"no app {missing[0]!r}: the scheduler does not know it "
                               "(`tether list -s SCHEDULER` shows the apps it knows)")
            for handle in handles:
                status = runner.status(handle)
                if status is not None and status.is_terminal():
                    print(f"{handle} already finished ({status.state.name}); nothing to cancel")
                    continue
                runner.cancel(handle)
                if args.wait:
                    status = runner.wait(handle, wait_interval=1)
                    state = status.state.name if status else "gone"
                    print(f"{handle} {state}")
                else:
                    print(f"cancelled {handle}")
