"""``tether wait``: wait for an app to finish; the exit code is its result.

``tether wait HANDLE`` blocks until the app is finished, showing its progress on stderr as
``tether run`` does, then prints ``HANDLE STATE`` on stdout (and the status on stderr unless
it succeeded). Exit code: 0 SUCCEEDED, 1 FAILED (or an unknown app), 3 CANCELLED, 4 any other
end, 130 Ctrl-C (the app keeps running).
"""

from __future__ import annotations

import argparse
import sys

from tether.cli.cmd_base import SubCommand
from tether.cli.common import (
    CLIError,
    add_handle_argument,
    check_handle,
    exit_code_for,
    get_runner,
    report_final,
)


class CmdWait(SubCommand):
    """Wait until an app finishes; exit 0 SUCCEEDED, 1 FAILED, 3 CANCELLED."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.epilog = (
            "Exit code: 0 SUCCEEDED, 1 FAILED or an unknown app, 3 CANCELLED, 4 any other "
            "end, 130 Ctrl-C (the app keeps running). Example: tether run --detach "
            "utils.sh sleep 5 | xargs tether wait"
        )
        add_handle_argument(subparser)

    def run(self, args: argparse.Namespace) -> None:
        from tether.cli.progress import Progress, wait_with_progress

        handle = check_handle(args.app_handle)
        with get_runner() as runner:
            if runner.status(handle) is None:
                raise CLIError(f"no app {handle!r}: the scheduler does not know it "
                               "(`tether list -s SCHEDULER` shows the apps it knows)")
            status = wait_with_progress(runner, handle, Progress(handle))
        report_final(handle, status)
        sys.exit(exit_code_for(status.state if status else None))
