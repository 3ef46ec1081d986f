"""``tether status``: the status of an app."""

from __future__ import annotations

import argparse
import json

from tether.cli.cmd_base import SubCommand
from tether.cli.common import (
    CLIError,
    add_handle_argument,
    check_handle,
    format_status,
    get_runner,
)


class CmdStatus(SubCommand):
    """Show the status of an app (state, restarts, every replica)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.epilog = (
            "Exit code: 0 when the scheduler reported the app's status, whatever its state "
            "(a FAILED app too); 1 when it cannot (an unknown app, an unreachable cluster). "
            "`tether wait HANDLE` exits with the app's result instead: 0 SUCCEEDED, "
            "1 FAILED, 3 CANCELLED."
        )
        add_handle_argument(subparser)
        subparser.add_argument("--role", dest="roles", action="append", metavar="ROLE",
                               help="only this role (repeatable)")
        subparser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> None:
        handle = check_handle(args.app_handle)
        with get_runner() as runner:
            status = runner.status(handle)
            progress = runner.progress(handle) if status is not None else None
        if status is None:
            raise CLIError(f"no app {handle!r}: the scheduler does not know it "
                           "(`tether list -s SCHEDULER` shows the apps it knows)")
        if args.roles:
            known = [r.role for r in status.roles]
            unknown = [r for r in args.roles if r not in known]
            if unknown:
                raise CLIError(f"app {handle} has no role {unknown[0]!r}; roles: "
                               f"{', '.join(known) or 'none'}")
        if args.json:
            doc = status.to_dict()
            if args.roles:
                roles = doc["roles"]
                assert isinstance(roles, list)
                doc["roles"] = [r for r in roles if r["role"] in args.roles]
            doc["progress"] = progress.to_dict() if progress is not None else None
            print(json.dumps(doc, indent=2))
        else:
            print(format_status(status, args.roles))
            if progress is not None:
                print(f"  progress: {progress.format()}")
