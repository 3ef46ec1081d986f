"""The layer rules of issue 13, read from the source with ``ast`` (nothing is imported).

Every import counts: module level, inside functions and methods, and under ``TYPE_CHECKING``
(a deferred or type-only import is still a dependency a reader has to follow).

* ``tether.errors`` (the exceptions' root) imports nothing of tether;
* ``tether.specs`` imports nothing of tether outside itself but ``tether.errors``;
* ``tether.schedulers`` never imports ``tether.runner``, ``tether.cli`` or ``tether.adapters``;
* nothing in ``core/`` imports ``tether.adapters``;
* no backend (a sub-package of ``tether.schedulers``) imports another backend: what two
  backends share lives in a module of the scheduler layer beside them;
* within each package, the graph of its modules and sub-packages has no cycle.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"core": REPO / "core", "adapters": REPO / "adapters"}


@dataclass(frozen=True)
class Import:
    """One import statement's target module."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, tuple[str, Path]]:
    """Module name -> (source root name, file) for every tether module."""
    out: dict[str, tuple[str, Path]] = {}
    for label, root in ROOTS.items():
        for path in sorted((root / "tether").rglob("*.py")):
            out[_module_name(root, path)] = (label, path)
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name][1].name == "__init__.py"


def _resolve(module: str, level: int, source: str) -> str:
    """The absolute name of ``from <dots><module> import ...`` in ``source``."""
    if not level:
        return module
    base = source.split(".")
    if not _is_package(source):
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _imports(name: str) -> Iterator[Import]:
    """Every tether module ``name`` imports, wherever the import statement is."""
    tree = ast.parse(MODULES[name][1].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tether"):
                    yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, name)
            if not base.startswith("tether"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # `from pkg import module` depends on the module, `from pkg import obj` on pkg
                yield Import(name, sub if sub in MODULES else base, node.lineno)


IMPORTS: dict[str, list[Import]] = {name: list(_imports(name)) for name in MODULES}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _violations(sources: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        str(imp)
        for name, imps in IMPORTS.items() if _within(name, sources)
        for imp in imps if any(_within(imp.target, f) for f in forbidden)
    ]


def test_the_source_tree_is_read() -> None:
    assert "tether.specs.app" in MODULES and "tether.adapters.kfp.steps" in MODULES
    # deferred (function-level) and TYPE_CHECKING imports are seen too
    assert any(i.target == "tether.runner" for i in IMPORTS["tether.adapters.airflow.operator"])
    assert any(i.target == "tether.specs.workspace" for i in IMPORTS["tether.specs.app"])


def test_errors_imports_nothing_of_tether() -> None:
    assert "tether.errors" in MODULES
    assert IMPORTS["tether.errors"] == []


def test_specs_imports_nothing_of_tether_but_errors() -> None:
    outside = [
        str(imp) for name, imps in IMPORTS.items() if _within(name, "tether.specs")
        for imp in imps if not _within(imp.target, "tether.specs") and imp.target != "tether.errors"
    ]
    assert outside == []


def test_schedulers_never_import_runner_cli_or_adapters() -> None:
    forbidden = ("tether.runner", "tether.cli", "tether.adapters")
    assert _violations("tether.schedulers", forbidden) == []


SHARED_SCHEDULER_PACKAGES = frozenset({"tether.schedulers.watch"})
"""Packages of the scheduler layer that every backend may use (not backends themselves)."""


def _backend(name: str) -> str | None:
    """The backend package (``tether.schedulers.<backend>``) holding module ``name``, or None."""
    parts = name.split(".")
    if len(parts) < 3 or parts[:2] != ["tether", "schedulers"]:
        return None
    package = ".".join(parts[:3])
    if package in SHARED_SCHEDULER_PACKAGES:
        return None
    return package if package in MODULES and _is_package(package) else None


def _cross_backend_imports() -> list[str]:
    return [
        str(imp)
        for name, imps in IMPORTS.items() if _backend(name)
        for imp in imps if _backend(imp.target) not in (None, _backend(name))
    ]


def test_no_backend_imports_another_backend() -> None:
    assert _cross_backend_imports() == []


def test_the_checker_finds_a_cross_backend_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deferred import of one backend's module from another is found; the shared modules of
    the scheduler layer and a backend's own modules are not."""
    source = "tether.schedulers.kubernetes.scheduler"
    fake = {
        source: [
            Import(source, "tether.schedulers.local_docker.render", 229),
            Import(source, "tether.schedulers.docker_engine", 230),
            Import(source, "tether.schedulers.kubernetes.render", 231),
        ],
        "tether.schedulers.api": [Import("tether.schedulers.api", "tether.schedulers.local", 9)],
    }
    monkeypatch.setattr(sys.modules[__name__], "IMPORTS", fake)
    assert _cross_backend_imports() == [str(fake[source][0])]


def test_core_never_imports_the_adapters() -> None:
    core = [
        str(imp) for name, imps in IMPORTS.items() if MODULES[name][0] == "core"
        for imp in imps if _within(imp.target, "tether.adapters")
    ]
    assert core == []


def _packages() -> list[str]:
    # "tether" is a namespace package (core and adapters share it): its graph is the one
    # between tether's top-level packages (specs, schedulers, runner, cli, adapters...)
    return ["tether", *sorted(n for n in MODULES if _is_package(n))]


def _node(name: str, package: str) -> str:
    """The node of ``name`` in ``package``'s graph: the package itself (its ``__init__``) or
    the direct child (module or sub-package) holding it."""
    if name == package:
        return package
    return ".".join(name.split(".")[: package.count(".") + 2])


def _graph(package: str) -> dict[str, dict[str, Import]]:
    """Node -> node it depends on -> one import that makes the edge."""
    graph: dict[str, dict[str, Import]] = {}
    for name, imps in IMPORTS.items():
        if not _within(name, package):
            continue
        src = _node(name, package)
        for imp in imps:
            if not _within(imp.target, package):
                continue
            dst = _node(imp.target, package)
            if dst != src:
                graph.setdefault(src, {}).setdefault(dst, imp)
    return graph


def _cycle(graph: dict[str, dict[str, Import]]) -> list[Import] | None:
    """One cycle of the graph as the imports along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            nodes = visit(start)
            if nodes:
                return [graph[a][b] for a, b in itertools.pairwise(nodes)]
    return None


@pytest.mark.parametrize("package", _packages())
def test_no_import_cycle_within_the_package(package: str) -> None:
    cycle = _cycle(_graph(package))
    assert cycle is None, f"import cycle in {package}:\n" + "\n".join(map(str, cycle or []))


def test_the_checker_finds_a_cycle_through_a_deferred_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checker itself: a function-level import closing a circle is a cycle, and the
    sub-package holding a module stands for it in its parent's graph."""
    fake = {
        "tether.x": [],
        "tether.x.a": [Import("tether.x.a", "tether.x.sub.b", 3)],
        "tether.x.sub": [],
        "tether.x.sub.b": [Import("tether.x.sub.b", "tether.x.a", 12)],  # inside a function
    }
    monkeypatch.setattr(sys.modules[__name__], "IMPORTS", fake)
    cycle = _cycle(_graph("tether.x"))
    assert cycle == [fake["tether.x.a"][0], fake["tether.x.sub.b"][0]]
    fake["tether.x.sub.b"] = []
    assert _cycle(_graph("tether.x")) is None


def test_deferred_and_type_checking_imports_are_parsed(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "mod.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from tether.specs import AppDef\n"
        "def f():\n"
        "    import tether.runner.api\n"
        "    from . import sibling\n"
    )
    monkeypatch.setitem(MODULES, "tether.adapters.fake", ("adapters", src))
    targets = {i.target for i in _imports("tether.adapters.fake")}
    assert targets == {"tether.specs", "tether.runner.api", "tether.adapters"}
