"""``tether prefect reap`` is a plugin command of the ``tether`` CLI."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tether.cli.main import create_parser

REPO = Path(__file__).resolve().parents[3]


def _entry_point() -> EntryPoint:
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is Python 3.11+)
    section = text.split('[project.entry-points."tether.cli.cmds"]', 1)[1].split("\n[", 1)[0]
    match = re.search(r'^prefect\s*=\s*"([^"]+)"', section, re.M)
    assert match, section
    value = match.group(1)
    return EntryPoint(name="prefect", value=value, group="tether.cli.cmds")


def test_tether_prefect_reap_runs_through_the_cli_plugin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["prefect", "reap", "-s", "local_cwd", "--dry-run"]
    parser, commands = create_parser(argv, plugins={"prefect": _entry_point()})
    args = parser.parse_args(argv)
    commands["prefect"].run(args)  # no jobs on local_cwd: nothing to ask Prefect about
    assert "no orphaned jobs" in capsys.readouterr().out


def test_tether_prefect_needs_an_action() -> None:
    argv = ["prefect"]
    parser, _ = create_parser(argv, plugins={"prefect": _entry_point()})
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
