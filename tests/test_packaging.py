"""What the project says it needs agrees with what its pins and its build need.

Two minimums: tether itself (``requires-python`` in pyproject.toml, stated in the README and
the docs) must admit the pins of its own dependencies (tether's image runs Debian's 3.11.2);
``make test`` (stated as "Python X or newer for make test") must admit every pinned package
of ``constraints/test.txt`` that the test environment installs: a newcomer on the oldest
Python we claim for it must be able to run ``make test``. And an
environment made as the README says (``pip install -e ".[all,dev]"``) must be able to build
tether's wheel the way the image build does (``pip wheel --no-build-isolation``), so the
``dev`` extra brings the build system's requirements.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _floor() -> Version:
    """The lowest Python version ``requires-python`` admits (its ``>=`` bound)."""
    spec = SpecifierSet(_pyproject()["project"]["requires-python"])
    (lower,) = [s for s in spec if s.operator == ">="]
    return Version(lower.version)


def _test_floor() -> Version:
    """The lowest Python the README states ``make test`` needs."""
    stated = re.findall(r"\*\*Python (\d+\.\d+(?:\.\d+)?) or newer for make test\*\*",
                        (REPO / "README.md").read_text())
    assert len(set(stated)) == 1, f"the README states the make test minimum once: {stated}"
    return Version(stated[0])


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints" / "test.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def _refused(floor: Version, names: set[str] | None = None) -> tuple[int, list[str]]:
    refused = []
    checked = 0
    for name, version in _pins().items():
        if names is not None and name.lower().replace("_", "-") not in names:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue  # not this pin's metadata: nothing to read here
        checked += 1
        requires = dist.metadata.get("Requires-Python")
        if requires and not SpecifierSet(requires).contains(floor, prereleases=True):
            refused.append(f"{name}=={version} (Requires-Python {requires})")
    return checked, refused


def test_every_installed_pin_runs_on_the_stated_make_test_minimum() -> None:
    floor = _test_floor()
    checked, refused = _refused(floor)
    assert checked > 50, "the test environment should have most pins installed"
    assert not refused, (
        f"the README says make test runs on {floor}, but these pins refuse it: {refused}; "
        "raise that minimum or pin versions that accept it"
    )


def test_tethers_own_dependencies_run_on_requires_python() -> None:
    floor = _floor()
    deps = {Requirement(r).name.lower().replace("_", "-")
            for r in _pyproject()["project"]["dependencies"]}
    checked, refused = _refused(floor, deps)
    assert checked >= len(deps) - 1, (checked, deps)
    assert not refused, f"requires-python says {floor}, but these dependencies refuse it: {refused}"
    assert _test_floor() >= floor


def test_readme_and_docs_state_the_same_minimum_python() -> None:
    floor = _floor()
    for doc in ("README.md", "docs/getting-started.md"):
        text = (REPO / doc).read_text()
        stated = re.findall(r"\*\*Python (\d+\.\d+(?:\.\d+)?) or newer\*\*", text)
        tests = re.findall(r"\*\*Python (\d+\.\d+(?:\.\d+)?) or newer for make test\*\*", text)
        assert {Version(v) for v in tests} == {_test_floor()}, (doc, tests)
        assert stated, f"{doc} does not state the minimum Python"
        assert {Version(v) for v in stated} == {floor}, (doc, stated, str(floor))


def test_the_dev_extra_brings_what_building_the_wheel_needs() -> None:
    data = _pyproject()
    dev = {Requirement(r).name for r in data["project"]["optional-dependencies"]["dev"]}
    build = {Requirement(r).name for r in data["build-system"]["requires"]}
    assert build <= dev, (
        f"the image build runs `pip wheel --no-build-isolation`, which needs {sorted(build)} "
        f"installed; the dev extra lacks {sorted(build - dev)}"
    )
