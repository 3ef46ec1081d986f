"""The documentation site builds with warnings as errors, and its CLI page matches the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strict_with_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    # every command's usage, straight from the parser (a renamed flag shows up here)
    for command in ("run", "status", "wait", "log", "cancel", "list", "runopts", "builtins"):
        assert f"usage: tether {command}" in cli, command
    assert "--detach" in cli
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "tether.specs.AppDef" in api and "tether.runner.get_runner" in api
