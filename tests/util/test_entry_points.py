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


def _run(argv: list[str], cache: Path, site: Path, cwd: Path) -> dict[str, object]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "core"), str(REPO / "adapters")]),
    }
    env.pop("TETHER_NO_ENTRY_POINT_CACHE", None)
    out = subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A cache dir, a site dir with one plugin distribution installed, a working dir."""
    cache, site, cwd = tmp_path / "cache", tmp_path / "site", tmp_path / "cwd"
    site.mkdir()
    cwd.mkdir()
    _dist(site, "plugin_a", "aaa", "pkg_a.components")
    return cache, site, cwd


def _probe(cache: Path, site: Path, cwd: Path) -> dict[str, object]:
    return _run(["-c", PROBE], cache, site, cwd)


def test_scanned_once_then_served_from_the_cache_until_an_install(tmp_path: Path) -> None:
    cache, site, cwd = _layout(tmp_path)

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
    cache, site, cwd = _layout(tmp_path)
    _probe(cache, site, cwd)
    (cache_file,) = (cache / "tether").iterdir()
    cache_file.write_text("{not json")
    res = _probe(cache, site, cwd)
    assert res["scanned"] is True and ["aaa", "pkg_a.components"] in res["eps"]
    assert json.loads(cache_file.read_text())["format"] == 1


def test_a_script_and_python_c_in_one_environment_each_keep_their_cache(tmp_path: Path) -> None:
    """A script puts its own directory first on ``sys.path``, ``python -c`` does not: the two
    used in turn (the CLI, then an orchestrator's worker) must not rescan at every call."""
    cache, site, cwd = _layout(tmp_path)
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "probe.py"
    script.write_text(PROBE.replace("; ", "\n"))

    def run_script() -> dict[str, object]:
        return _run([str(script)], cache, site, cwd)

    assert _probe(cache, site, cwd)["scanned"] is True
    assert run_script()["scanned"] is True
    for _ in range(2):
        assert _probe(cache, site, cwd)["scanned"] is False
        assert run_script()["scanned"] is False
    assert len(list((cache / "tether").iterdir())) == 2


def test_cache_files_per_environment_are_bounded(tmp_path: Path) -> None:
    cache, site, cwd = _layout(tmp_path)
    _probe(cache, site, cwd)
    (mine,) = (cache / "tether").iterdir()
    env_prefix = mine.name.rsplit("-", 1)[0]
    for i in range(40):  # left by other search paths of the same environment
        stale = cache / "tether" / f"{env_prefix}-{i:08x}.json"
        stale.write_text("{}")
        os.utime(stale, (1_000_000 + i, 1_000_000 + i))
    os.utime(mine, (1_000_000, 1_000_000))
    (site / "plugin_b-1.0.dist-info").mkdir()  # an install: the next call writes again
    _probe(cache, site, cwd)
    left = sorted(p.name for p in (cache / "tether").iterdir())
    assert len(left) == 16 and mine.name in left  # the one just written stays
