"""tether's entry-point cache: read once, reused by later commands, refreshed by installs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = (
    "import sys, json; from tether.util.entry_points import entry_points; "
    "eps = entry_points('tether.components'); "
    "print(json.dumps({'scanned': 'importlib.metadata' in sys.modules, "
    "'eps': [[e.name, e.value] for e in eps]}))"
)


def _dist(site: Path, name: str, prefix: str, module: str) -> None:
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[tether.components]\n{prefix} = {module}\n")


def _probe(cache: Path, site: Path, cwd: Path) -> dict[str, object]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "core"), str(REPO / "adapters")]),
    }
    env.pop("TETHER_NO_ENTRY_POINT_CACHE", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_scanned_once_then_served_from_the_cache_until_an_install(tmp_path: Path) -> None:
    cache, site, cwd = tmp_path / "cache", tmp_path / "site", tmp_path / "cwd"
    site.mkdir()
    cwd.mkdir()
    _dist(site, "plugin_a", "aaa", "pkg_a.components")

    first = _probe(cache, site, cwd)
    assert first["scanned"] is True and ["aaa", "pkg_a.components"] in first["eps"]
    files = list((cache / "tether").iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600

    again = _probe(cache, site, cwd)
    assert again == {**first, "scanned": False}  # no metadata scan: read from the cache

    # installing a distribution changes its directory: the next command sees it
    _dist(site, "plugin_b", "bbb", "pkg_b.components")
    after = _probe(cache, site, cwd)
    assert after["scanned"] is True and ["bbb", "pkg_b.components"] in after["eps"]


def test_a_damaged_cache_file_is_ignored_and_rewritten(tmp_path: Path) -> None:
    cache, site, cwd = tmp_path / "cache", tmp_path / "site", tmp_path / "cwd"
    site.mkdir()
    cwd.mkdir()
    _dist(site, "plugin_a", "aaa", "pkg_a.components")
    _probe(cache, site, cwd)
    (cache_file,) = (cache / "tether").iterdir()
    cache_file.write_text("{not json")
    res = _probe(cache, site, cwd)
    assert res["scanned"] is True and ["aaa", "pkg_a.components"] in res["eps"]
    assert json.loads(cache_file.read_text())["format"] == 1
