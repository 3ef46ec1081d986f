"""MkDocs hook: fills ``<!-- cli-reference -->`` with the help of every ``tether`` command.

The text comes from the argument parser the ``tether`` command itself uses, so the reference
cannot drift from the CLI.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- cli-reference -->"


def _parser() -> argparse.ArgumentParser:
    for sub in ("core", "adapters"):
        path = str(ROOT / sub)
        if path not in sys.path:
            sys.path.insert(0, path)
    from tether.cli.main import create_parser

    parser, _ = create_parser(plugins={}, all_commands=True)
    return parser


def _help(parser: argparse.ArgumentParser) -> str:
    os.environ["COLUMNS"] = "100"
    return parser.format_help().rstrip()


def cli_reference() -> str:
    """The reference: ``tether --help``, then a section per command."""
    parser = _parser()
    parts = ["## tether", "", "```text", _help(parser), "```"]
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    for name, sub in subparsers.choices.items():
        parts += ["", f"## tether {name}", "", "```text", _help(sub), "```"]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replaces the marker on the page that has it."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
