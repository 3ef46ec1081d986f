"""``tether log``: the log lines of an app's replicas.

``tether log [--tail] [--regex RE] [--since T] [--until T] [--streams S] HANDLE[/ROLE[/K,K2]]``

Every line is prefixed ``role/replica`` (``--no-prefix`` drops it). Lines of several replicas
are merged as they arrive; with ``--tail`` the command follows the logs until the replicas
finish.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError, check_handle, get_runner, parse_time

if TYPE_CHECKING:
    from tether.runner import Runner

STREAMS = ("stdout", "stderr", "combined")


def split_identifier(runner: Runner, identifier: str) -> tuple[str, str | None, list[int] | None]:
    """Splits ``HANDLE[/ROLE[/K,K2]]`` into the handle, role and replica indices.

    The longest prefix the scheduler knows as an app wins, so app ids may contain ``/``.

    Args:
        runner: The runner (to ask which app exists).
        identifier: The value given on the command line.

    Returns:
        ``(handle, role or None, replicas or None)``.

    Raises:
        CLIError: When no prefix is a known app, or the replica list is malformed.
    """
    check_handle(identifier)
    scheme, sep, path = identifier.partition("://")
    parts = path.split("/")
    # session/app_id[/role[/replicas]]
    for extra in range(0, min(2, max(len(parts) - 2, 0)) + 1):
        keep = len(parts) - extra
        handle = f"{scheme}{sep}{'/'.join(parts[:keep])}"
        if runner.status(handle) is None:
            continue
        tail = parts[keep:]
        role = tail[0] if tail else None
        replicas: list[int] | None = None
        if len(tail) > 1 and tail[1]:
            try:
                replicas = [int(k) for k in tail[1].split(",") if k.strip()]
            except ValueError:
                raise CLIError(
                    f"replicas {tail[1]!r} in {identifier!r} must be indices like 0 or 0,1"
                ) from None
        return handle, role, replicas
    raise CLIError(f"no app {identifier!r}: the scheduler does not know it "
                   "(`tether list -s SCHEDULER` shows the apps it knows)")


def _targets(
    runner: Runner, handle: str, role: str | None, replicas: list[int] | None
) -> dict[str, list[int]]:
    """The replicas to read, by role, after checking the names and indices the user gave."""
    app = runner.describe(handle)
    status = runner.status(handle)
    by_role: dict[str, int] = {}
    if app is not None and app.roles:
        by_role = {r.name: r.num_replicas for r in app.roles}
    elif status is not None:
        by_role = {rs.role: len(rs.replicas) for rs in status.roles}
    if role is not None:
        if role not in by_role:
            raise CLIError(f"app {handle} has no role {role!r}; roles: "
                           f"{', '.join(by_role) or 'none'}")
        by_role = {role: by_role[role]}
    selected: dict[str, list[int]] = {}
    for name, count in by_role.items():
        ks = replicas if replicas is not None else list(range(count))
        bad = [k for k in ks if not 0 <= k < count]
        if bad:
            raise CLIError(f"role {name!r} of {handle} has replicas 0..{count - 1}; "
                           f"there is no replica {bad[0]}")
        if ks:
            selected[name] = ks
    return selected


class CmdLog(SubCommand):
    """Print the logs of an app's replicas (HANDLE[/ROLE[/REPLICA,...]])."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument(
            "identifier", metavar="HANDLE[/ROLE[/K,K2]]",
            help="the app, optionally one role and some replica indices",
        )
        subparser.add_argument("-t", "--tail", action="store_true",
                               help="follow the logs until the replicas finish")
        subparser.add_argument("-e", "--regex", default=None,
                               help="only lines matching this regular expression")
        subparser.add_argument("--since", default=None,
                               help="only lines at or after this time (ISO time or 5m, 2h ago)")
        subparser.add_argument("--until", default=None,
                               help="only lines before this time (ISO time or 5m, 2h ago)")
        subparser.add_argument("--streams", choices=STREAMS, default=None,
                               help="stdout, stderr or both (default: combined)")
        subparser.add_argument("-r", "--role", default=None, help="only this role")
        subparser.add_argument("-k", "--replica", dest="replicas", default=None,
                               metavar="K[,K2]", help="only these replica indices")
        subparser.add_argument("--no-prefix", dest="prefix", action="store_false",
                               help="print the lines without the role/replica prefix")

    def run(self, args: argparse.Namespace) -> None:
        import re

        from tether.runner.logs import LogReadError, fan_in
        from tether.schedulers.api import Stream

        since: datetime | None = parse_time(args.since) if args.since else None
        until: datetime | None = parse_time(args.until) if args.until else None
        if args.regex:
            try:
                re.compile(args.regex)
            except re.error as e:
                raise CLIError(f"--regex {args.regex!r} is not a valid regular expression: {e}"
                               ) from None
        with get_runner() as runner:
            handle, role, replicas = split_identifier(runner, args.identifier)
            if args.role:
                if role is not None and role != args.role:
                    raise CLIError(f"role given twice: {role!r} in the handle and "
                                   f"--role {args.role!r}")
                role = args.role
            if args.replicas:
                try:
                    replicas = [int(k) for k in args.replicas.split(",") if k.strip()]
                except ValueError:
                    raise CLIError(f"--replica {args.replicas!r} must be indices like 0 or 0,1"
                                   ) from None
            selected = _targets(runner, handle, role, replicas)
            if not selected:
                raise CLIError(f"app {handle} has no replicas to read logs from")
            lines = fan_in(
                runner, handle, roles=selected, regex=args.regex, since=since, until=until,
                should_tail=args.tail, streams=Stream(args.streams) if args.streams else None,
                raise_errors=True,
            )
            try:
                for line in lines:
                    text = line.format() if args.prefix else line.line.rstrip("\n")
                    sys.stdout.write(text + "\n")
                    sys.stdout.flush()
            except LogReadError as e:
                raise CLIError(str(e)) from None
