"""``tether list``: the apps a scheduler knows."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from tether.cli.cmd_base import SubCommand
from tether.cli.common import get_runner


class CmdList(SubCommand):
    """List the apps launched on a scheduler, oldest first."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.add_argument("-s", "--scheduler", default=None,
                               help="the scheduler (default: local_cwd)")
        subparser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> None:
        from tether.schedulers import get_default_scheduler_name

        scheduler = args.scheduler or get_default_scheduler_name()
        with get_runner() as runner:
            apps = runner.list(scheduler)
        apps.sort(key=lambda a: (a.created or 0.0, a.app_id))
        if args.json:
            print(json.dumps([
                {"app_handle": a.app_handle, "app_id": a.app_id, "state": a.state.name,
                 "name": a.name, "job_key": a.job_key, "created": a.created}
                for a in apps
            ], indent=2))
            return
        if not apps:
            print(f"no apps on {scheduler}")
            return
        rows = [("APP HANDLE", "STATE", "NAME", "CREATED")]
        for a in apps:
            created = (datetime.fromtimestamp(a.created).strftime("%Y-%m-%d %H:%M:%S")
                       if a.created else "")
            rows.append((a.app_handle, a.state.name, a.name, created))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip())
