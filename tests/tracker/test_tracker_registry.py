"""The tracker registry: lazy built-ins, entry-point plugins, clashes, unknown names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tether.tracker import (
    BUILTIN_TRACKERS,
    TrackerRegistryError,
    UnknownTrackerError,
    build_trackers,
    get_tracker_factories,
    get_tracker_factory,
)
from tether.tracker.backend.fsspec import FsspecTracker

ROOT = Path(__file__).resolve().parents[2]


def _install_plugin(site: Path, entry: str, module: str = "", name: str = "myplug") -> None:
    """A real installed distribution (dist-info on sys.path) declaring ``entry``."""
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[tether.tracker]\n{entry}\n")
    if module:
        (site / f"{name}_mod.py").write_text(textwrap.dedent(module))


def test_importing_the_package_imports_no_backend() -> None:
    code = (
        "import sys, tether.tracker, tether.runner\n"
        "bad = [m for m in ('mlflow', 'fsspec', 'tether.tracker.backend.fsspec',"
        " 'tether.tracker.backend.mlflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_builtins_are_declared_in_pyproject_too() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["tether.tracker"] == BUILTIN_TRACKERS


def test_builtin_factory_creates_backend(tmp_path: Path) -> None:
    tracker = get_tracker_factory("fsspec")(str(tmp_path / "s"))
    assert isinstance(tracker, FsspecTracker)
    assert list(get_tracker_factories())[:2] == ["fsspec", "mlflow"]


def test_unknown_tracker_names_close_matches() -> None:
    with pytest.raises(UnknownTrackerError, match=r"unknown tracker 'mlflw'\. Did you mean mlflow"):
        get_tracker_factory("mlflw")
    with pytest.raises(UnknownTrackerError, match="Available: fsspec, mlflow"):
        build_trackers({"nope": None})


def test_plugin_from_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    _install_plugin(
        site,
        "mine = myplug_mod:create",
        """
        from tether.tracker.backend.fsspec import FsspecTracker

        class MyTracker(FsspecTracker):
            pass

        def create(config):
            return MyTracker(config or "memory://myplug")
        """,
    )
    monkeypatch.syspath_prepend(str(site))
    trackers = build_trackers({"mine": str(tmp_path / "store"), "fsspec": str(tmp_path / "f")})
    assert type(trackers["mine"]).__name__ == "MyTracker"
    trackers["mine"].add_metadata("run://1", a=1)
    assert trackers["mine"].metadata("run://1") == {"a": 1}


def test_plugin_that_cannot_load_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path / "site", "broken = no_such_module_xyz:create")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(TrackerRegistryError, match="tracker 'broken': cannot load its factory"):
        build_trackers({"broken": None})


def test_plugin_reusing_a_builtin_name_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(tmp_path / "site", "fsspec = other_pkg.tracking:create")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(TrackerRegistryError, match="clashes with the built-in 'fsspec'"):
        get_tracker_factories()


def test_builtin_declared_as_entry_point_is_not_a_clash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(tmp_path / "site", f"mlflow = {BUILTIN_TRACKERS['mlflow']}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "mlflow" in get_tracker_factories()
