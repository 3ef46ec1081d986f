"""``tether prefect reap``: cancel the jobs of Prefect flow runs that have ended.

A component task cancels its job when Prefect stops the flow run (a timeout, the termination
signal, the Cancel button). A flow-run process killed outright (``kill -9``, an OOM kill, a
lost node) cancels nothing: its jobs keep running. A rerun of the same flow run re-attaches
to them (see :mod:`tether.adapters.prefect.identity`); otherwise this command finds them:
every job carries the id of the flow run that launched it, and a job still running whose
flow run is in an ended state (by default CANCELLED, CANCELLING, CRASHED or FAILED) is
cancelled.

Run it by hand, from cron, or as a scheduled Prefect flow (``docs/prefect.md`` shows one)::

    tether prefect reap -s kubernetes --dry-run
    python -m tether.adapters.prefect.reap -s local_cwd
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.adapters.prefect.identity import flow_run_of
from tether.cli.cmd_base import SubCommand
from tether.errors import SpecError
from tether.runner import Runner, get_runner

log = logging.getLogger(__name__)

DEFAULT_STATES = ("CANCELLED", "CANCELLING", "CRASHED", "FAILED")
"""Flow run states whose jobs are cancelled by default."""

ALL_STATES = ("SCHEDULED", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED",
              "CRASHED", "PAUSED", "CANCELLING")


class ReapError(SpecError):
    """Bad input to ``tether prefect reap``."""


@dataclass
class Orphan:
    """A job whose flow run has ended.

    Attributes:
        app_handle: The job.
        flow_run_id: The flow run that launched it.
        flow_run_state: That flow run's state (``MISSING`` when Prefect does not know it).
        cancelled: Whether it was cancelled (False in a dry run or when cancelling failed).
    """

    app_handle: str
    flow_run_id: str
    flow_run_state: str
    cancelled: bool = False


def _check_states(states: Iterable[str]) -> set[str]:
    import difflib

    out = set()
    for raw in states:
        state = raw.strip().upper()
        if state not in ALL_STATES:
            close = difflib.get_close_matches(state, ALL_STATES, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ReapError(f"--states: unknown flow run state {raw!r}{hint}; "
                            f"allowed: {', '.join(ALL_STATES)}")
        out.add(state)
    return out


def _running_jobs(runner: Runner, scheduler: str) -> dict[str, str]:
    """Job handle -> flow run id, for the scheduler's unfinished jobs a Prefect task launched."""
    found: dict[str, str] = {}
    for app in runner.list(scheduler):
        if app.state.is_terminal():
            continue
        flow_run_id = flow_run_of(runner.describe(app.app_handle))
        if flow_run_id:
            found[app.app_handle] = flow_run_id
    return found


def _flow_run_states(client: Any, ids: Sequence[str]) -> dict[str, str]:
    from uuid import UUID

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    states: dict[str, str] = {}
    uuids = []
    for i in ids:
        try:
            uuids.append(UUID(i))
        except ValueError:
            log.warning("ignoring a job with a malformed flow run id %r", i)
    for start in range(0, len(uuids), 200):
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=uuids[start:start + 200])),
            limit=200,
        )
        for run in runs:
            states[str(run.id)] = run.state.type.value if run.state is not None else "UNKNOWN"
    return states


def reap(
    schedulers: Sequence[str],
    states: Iterable[str] = DEFAULT_STATES,
    include_missing: bool = False,
    dry_run: bool = False,
    runner: Runner | None = None,
) -> list[Orphan]:
    """Cancels the unfinished jobs whose Prefect flow run has ended.

    Args:
        schedulers: Where to look for jobs.
        states: Flow run states that count as ended.
        include_missing: Also cancel jobs whose flow run Prefect does not know (deleted).
            Off by default: pointed at the wrong API, every job would look orphaned.
        dry_run: Only report what would be cancelled.
        runner: A runner (default: a new one, closed here).

    Returns:
        The orphaned jobs found.

    Raises:
        ReapError: For an unknown state name.
    """
    from prefect.client.orchestration import get_client

    wanted = _check_states(states)
    own = runner is None
    r = runner or get_runner()
    try:
        jobs: dict[str, str] = {}
        for scheduler in schedulers:
            jobs.update(_running_jobs(r, scheduler))
        if not jobs:
            return []
        with get_client(sync_client=True) as client:
            known = _flow_run_states(client, sorted(set(jobs.values())))
        orphans: list[Orphan] = []
        for handle, flow_run_id in sorted(jobs.items()):
            state = known.get(flow_run_id, "MISSING")
            if state in wanted or (include_missing and state == "MISSING"):
                orphan = Orphan(handle, flow_run_id, state)
                if not dry_run:
                    try:
                        r.cancel(handle)
                        orphan.cancelled = True
                    except Exception as e:
                        log.error("cannot cancel %s: %s", handle, e)
                orphans.append(orphan)
        return orphans
    finally:
        if own:
            r.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``reap``.

    Args:
        parser: The parser to add them to.
    """
    parser.add_argument("-s", "--scheduler", action="append", dest="schedulers", default=None,
                        help="where to look for jobs (repeatable; default: [cli:run] "
                        "scheduler of .tetherconfig, else the default scheduler)")
    parser.add_argument("--states", default=",".join(DEFAULT_STATES),
                        help="flow run states whose jobs are cancelled (comma-separated; "
                        f"default {','.join(DEFAULT_STATES)})")
    parser.add_argument("--include-missing", action="store_true",
                        help="also cancel jobs whose flow run Prefect does not know")
    parser.add_argument("--dry-run", action="store_true",
                        help="only list the jobs that would be cancelled")


def run_reap(args: argparse.Namespace) -> int:
    """Runs ``reap`` with parsed arguments and prints one line per orphaned job.

    Args:
        args: From :func:`add_arguments`.

    Returns:
        The exit code: 0, or 1 when a job could not be cancelled.
    """
    with get_runner() as runner:
        schedulers = args.schedulers or [
            runner.config.cli_defaults("run").get("scheduler") or runner.scheduler_backends()[0]
        ]
        orphans = reap(schedulers, args.states.split(","), args.include_missing, args.dry_run,
                       runner=runner)
    for o in orphans:
        verb = "cancelled" if o.cancelled else "FAILED to cancel"
        if args.dry_run:
            verb = "would cancel"
        print(f"{verb} {o.app_handle} (flow run {o.flow_run_id} is {o.flow_run_state})")
    if not orphans:
        print("no orphaned jobs")
    return 0 if args.dry_run or all(o.cancelled for o in orphans) else 1


class CmdPrefect(SubCommand):
    """Prefect helpers: `tether prefect reap` cancels jobs of flow runs that have ended."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        sub = subparser.add_subparsers(dest="prefect_command", metavar="ACTION", required=True)
        reap_parser = sub.add_parser("reap", help="cancel the jobs of flow runs that ended",
                                     description=__doc__.split("\n\n", 1)[0])
        add_arguments(reap_parser)

    def run(self, args: argparse.Namespace) -> None:
        code = run_reap(args)
        if code:
            raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tether.adapters.prefect.reap``.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(prog="python -m tether.adapters.prefect.reap",
                                     description=__doc__.split("\n\n", 1)[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_reap(args)
    except ReapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
