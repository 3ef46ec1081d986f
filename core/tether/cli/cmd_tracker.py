"""``tether tracker``: read tracked runs back (a thin layer over :mod:`tether.tracker`).

::

    tether tracker list jobs [--parent-run-id RUN_ID]
    tether tracker list metadata RUN_ID
    tether tracker list artifacts [--artifact NAME] RUN_ID
    tether tracker list lineage RUN_ID
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.cmd_base import SubCommand
from tether.cli.common import CLIError


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


class CmdTracker(SubCommand):
    """Query tracked runs: jobs, metadata, artifacts and lineage."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        verbs = subparser.add_subparsers(dest="tracker_verb", metavar="VERB")
        verbs.required = True
        lst = verbs.add_parser("list", help="list jobs, metadata, artifacts or lineage")
        what = lst.add_subparsers(dest="tracker_what", metavar="WHAT")
        what.required = True
        jobs = what.add_parser("jobs", help="the tracked runs")
        jobs.add_argument("--parent-run-id", "--parent_run_id", dest="parent_run_id",
                          default=None, help="only the children of this run")
        md = what.add_parser("metadata", help="the metadata of a run")
        md.add_argument("run_id", help="the run (an app handle)")
        arts = what.add_parser("artifacts", help="the artifacts of a run")
        arts.add_argument("--artifact", default=None, help="only this artifact")
        arts.add_argument("run_id", help="the run (an app handle)")
        lin = what.add_parser("lineage", help="the parents and children of a run")
        lin.add_argument("run_id", help="the run (an app handle)")

    def run(self, args: argparse.Namespace) -> None:
        from tether import tracker

        try:
            self._run(tracker, args)
        except tracker.TrackerNotConfiguredError as e:
            raise CLIError(str(e)) from None

    @staticmethod
    def _run(tracker: Any, args: argparse.Namespace) -> None:
        what = args.tracker_what
        if what == "jobs":
            for run_id in tracker.list_jobs(parent_run_id=args.parent_run_id):
                print(run_id)
        elif what == "metadata":
            for key, value in tracker.list_metadata(args.run_id).items():
                print(f"{key}: {_value(value)}")
        elif what == "artifacts":
            for name, art in tracker.list_artifacts(args.run_id, args.artifact).items():
                meta = f"  {json.dumps(dict(art.metadata), default=str)}" if art.metadata else ""
                print(f"{name}: {art.path}{meta}")
        elif what == "lineage":
            print(tracker.format_lineage_tree(tracker.lineage(args.run_id)))
        else:  # argparse enforces the choices
            raise CLIError(f"unknown tracker query {what!r}")
