"""The test run registers its fixture plugin for itself only: the user's venv stays clean."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN_TESTS = [
    "tests/cli/test_main.py::test_plugin_command_runs",
    "tests/components/test_finder.py::test_entry_point_components_get_the_prefix",
]


def _user_venv(root: Path) -> Path:
    """A venv holding what this one holds, minus any earlier install of the fixture plugin.

    Its site-packages links every entry of this interpreter's site-packages (no copies, no
    downloads); an install into it would land in its own directory, where the test sees it.
    """
    base = getattr(sys, "_base_executable", sys.executable)
    venv = root / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    purelib = Path(
        sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
    )
    for entry in ours.iterdir():
        if "tether_test_plugin" in entry.name or "tether-test-plugin" in entry.name:
            continue
        target = purelib / entry.name
        if not target.exists():
            target.symlink_to(entry)
    return venv


@pytest.mark.slow
def test_running_the_plugin_tests_installs_nothing_into_the_venv(tmp_path: Path) -> None:
    venv = _user_venv(tmp_path)
    python = str(venv / "bin" / "python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "core"),
                                                         str(REPO / "adapters")])}
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_TESTS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout

    builtins = subprocess.run(
        [python, "-m", "tether.cli.main", "builtins"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert builtins.returncode == 0, builtins.stderr
    assert ". utils.echo " in builtins.stdout
    assert "foo." not in builtins.stdout, builtins.stdout
    helptext = subprocess.run(
        [python, "-m", "tether.cli.main", "--help"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    ).stdout
    assert "tether_test_plugin" not in helptext
