"""The README and the docs name every backend that ships, where a newcomer first reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tether.schedulers import BUILTIN_SCHEDULERS

REPO = Path(__file__).resolve().parents[1]


def _intro(path: Path) -> str:
    """The page's first paragraph that says what a scheduler is."""
    text = path.read_text()
    (para,) = [p for p in text.split("\n\n") if "A *scheduler* runs it" in p]
    return para


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_introduction_names_every_backend(page: str) -> None:
    intro = _intro(REPO / page)
    missing = [name for name in BUILTIN_SCHEDULERS if f"`{name}`" not in intro]
    assert not missing, f"{page}'s introduction leaves out {missing}"


@pytest.mark.parametrize("page", ["README.md", "docs/schedulers.md"])
def test_the_schedulers_overview_table_lists_every_backend(page: str) -> None:
    text = (REPO / page).read_text()
    table = re.search(r"^\| name \|.*?\n(?:\|.*\n)+", text, re.M)
    assert table, f"{page} has no overview table"
    rows = set(re.findall(r"^\| `(\w+)`", table.group(0), re.M))
    assert set(BUILTIN_SCHEDULERS) <= rows, sorted(set(BUILTIN_SCHEDULERS) - rows)
