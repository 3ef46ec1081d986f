"""``tether describe``: the AppDef of a launched app; for a logical job (``chain://...``)
also each attempt: its number, scheduler, handle, state and cause."""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, add_handle_argument, check_handle, format_app, get_runner
from tether.specs.secrets import mask_text


class CmdDescribe(SubCommand):
    """Show the definition of a launched app (secret env values masked)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        add_handle_argument(subparser)

    def run(self, args: argparse.Namespace) -> None:
        handle = check_handle(args.app_handle)
        with get_runner() as runner:
            app = runner.describe(handle)
            attempts = runner.attempts(handle)
        if app is None and not attempts:
            raise CLIError(f"no app {handle!r}: the scheduler does not know it "
                           "(`tether list -s SCHEDULER` shows the apps it knows)")
        if app is not None:
            print(format_app(app))
        if attempts:
            print("Attempts:")
        for a in attempts:
            end = f" {a['state']}" + (f" ({a['cause']})" if a["cause"] else "")
            print(f"  {a['attempt']}: {a['scheduler']} {a['handle'] or '(not submitted)'}"
                  f"{end if a['state'] else ''}")
            for refusal in a["refused"]:
                print(f"     refused by {mask_text(refusal)}")
