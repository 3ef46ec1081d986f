"""``tether delete``: cancel apps and remove what the scheduler keeps of them."""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, check_handle, get_runner


class CmdDelete(SubCommand):
    """Delete apps: cancel them if running and remove their records and logs."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        from tether.cli.cmd_list import add_filter_arguments

        subparser.epilog = (
            "Prune finished apps: tether delete --finished (every SUCCEEDED, FAILED or "
            "CANCELLED app of the scheduler; --state and --limit narrow it as for `tether "
            "list`, whose output shows what would go)."
        )
        subparser.add_argument(
            "app_handle", nargs="*", metavar="APP_HANDLE",
            help="{scheduler}://{session}/{app_id}, as printed by `tether run` and `tether "
                 "list`",
        )
        subparser.add_argument("--finished", action="store_true",
                               help="delete the apps that are finished, instead of handles")
        add_filter_arguments(subparser)

    def run(self, args: argparse.Namespace) -> None:
        if args.finished:
            self._prune(args)
            return
        if not args.app_handle:
            raise CLIError("name the apps to delete (APP_HANDLE ...) or give --finished")
        if args.state or args.limit or args.scheduler:
            raise CLIError("-s, --state and --limit select apps for --finished only")
        handles = [check_handle(h) for h in args.app_handle]
        with get_runner() as runner:
            missing = [h for h in handles if runner.status(h) is None]
            if missing:
                raise CLIError(f"no app {missing[0]!r}: the scheduler does not know it "
                               "(`tether list -s SCHEDULER` shows the apps it knows)")
            for handle in handles:
                runner.delete(handle)
                print(f"deleted {handle}")

    @staticmethod
    def _prune(args: argparse.Namespace) -> None:
        from tether.cli.cmd_list import parse_states, selected_apps

        if args.app_handle:
            raise CLIError("give either APP_HANDLEs or --finished, not both")
        finished = parse_states(["FINISHED"])
        if args.state and not parse_states(args.state) <= finished:
            raise CLIError("--finished deletes finished apps only: --state can be SUCCEEDED, "
                           "FAILED or CANCELLED")
        args.state = args.state or ["FINISHED"]
        scheduler, apps = selected_apps(args)
        with get_runner() as runner:
            for app in apps:
                runner.delete(app.app_handle)
                print(f"deleted {app.app_handle}")
        if not apps:
            print(f"no finished apps on {scheduler}")
