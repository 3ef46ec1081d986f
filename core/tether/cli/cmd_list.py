"""``tether list``: the apps a scheduler knows."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, get_runner

if TYPE_CHECKING:
    from tether.schedulers.api import ListAppResponse
    from tether.specs import AppState


def parse_states(names: list[str] | None) -> set[AppState]:
    """The app states named by ``--state`` (case-insensitive; commas or repeats).

    Args:
        names: The values given (None: every state).

    Returns:
        The states (empty: no filter).

    Raises:
        CLIError: A name that is no state, with the allowed ones.
    """
    from tether.specs import AppState

    states: set[AppState] = set()
    for name in (n.strip() for v in names or () for n in v.split(",")):
        if not name:
            continue
        if name.upper() == "FINISHED":
            states |= {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
            continue
        try:
            states.add(AppState[name.upper()])
        except KeyError:
            import difflib

            allowed = [s.name for s in AppState]
            close = difflib.get_close_matches(name.upper(), allowed, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise CLIError(f"--state {name!r} is not an app state{hint} (allowed: "
                           f"{', '.join(allowed)}, or FINISHED for the final ones)") from None
    return states


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def filter_apps(
    apps: list[ListAppResponse], states: set[AppState], limit: int | None
) -> list[ListAppResponse]:
    """Oldest first, only the given states (all when empty), only the ``limit`` newest."""
    apps = sorted(apps, key=lambda a: (a.created or 0.0, a.app_id))
    if states:
        apps = [a for a in apps if a.state in states]
    return apps[-limit:] if limit else apps


def add_filter_arguments(subparser: argparse.ArgumentParser) -> None:
    """``-s``, ``--state`` and ``--limit``: which apps (``tether list``, ``tether delete``)."""
    subparser.add_argument("-s", "--scheduler", default=None,
                           help="the scheduler (default: local_cwd)")
    subparser.add_argument(
        "--state", action="append", metavar="STATE[,STATE]",
        help="only apps in these states (RUNNING, FAILED..., or FINISHED for SUCCEEDED, "
             "FAILED and CANCELLED; repeatable)")
    subparser.add_argument("--limit", type=_positive, default=None, metavar="N",
                           help="only the N most recent apps")


def selected_apps(args: argparse.Namespace) -> tuple[str, list[ListAppResponse]]:
    """The scheduler and the apps that ``-s``, ``--state`` and ``--limit`` select."""
    from tether.schedulers import get_default_scheduler_name

    wanted = parse_states(args.state)
    scheduler = args.scheduler or get_default_scheduler_name()
    with get_runner() as runner:
        apps = runner.list(scheduler)
    return scheduler, filter_apps(apps, wanted, args.limit)


class CmdList(SubCommand):
    """List the apps launched on a scheduler, oldest first."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.epilog = ("Example: tether list --state FAILED --limit 5. Remove finished "
                            "apps with `tether delete --finished`.")
        add_filter_arguments(subparser)
        subparser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> None:
        scheduler, apps = selected_apps(args)
        if args.json:
            print(json.dumps([
                {"app_handle": a.app_handle, "app_id": a.app_id, "state": a.state.name,
                 "name": a.name, "job_key": a.job_key, "created": a.created}
                for a in apps
            ], indent=2))
            return
        if not apps:
            print(f"no apps on {scheduler}" + (" match" if args.state else ""))
            return
        rows = [("APP HANDLE", "STATE", "NAME", "CREATED")]
        for a in apps:
            created = (datetime.fromtimestamp(a.created).strftime("%Y-%m-%d %H:%M:%S")
                       if a.created else "")
            rows.append((a.app_handle, a.state.name, a.name, created))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip())
