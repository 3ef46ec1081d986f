"""docs/migrating-from-torchx.md tells the truth about the built-in schedulers and components."""

from __future__ import annotations

import re
from pathlib import Path

from tether.schedulers import BUILTIN_SCHEDULERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "migrating-from-torchx.md"


def _paragraph(text: str, start: str) -> str:
    at = text.index(start)
    end = text.find("\n\n", at)
    return text[at : end if end >= 0 else len(text)]


def test_the_list_of_built_in_schedulers_is_the_registry() -> None:
    text = DOC.read_text()
    listed = re.findall(r"`([a-z_]+)`", _paragraph(text, "Built-in schedulers:").split(
        "(", 1)[0])
    assert listed == list(BUILTIN_SCHEDULERS), (
        f"{DOC.name} lists {listed}; the registry has {list(BUILTIN_SCHEDULERS)}"
    )
    assert "are built in on this branch" not in text


def test_every_builtin_component_the_doc_names_exists() -> None:
    from tether.components.finder import get_components

    text = _paragraph(DOC.read_text(), "`dist.ddp` and `dist.spmd` take")
    names = set(re.findall(r"`((?:dist|utils|serve|metrics)\.[a-z_]+)`", text))
    assert names and names <= set(get_components()), names - set(get_components())


def test_every_tether_name_in_the_modules_row_imports() -> None:
    import importlib

    row = next(
        line for line in DOC.read_text().splitlines() if line.startswith("| Modules |")
    )
    names = re.findall(r"`(tether(?:\.[A-Za-z_]+)+)`", row)
    assert len(names) >= 15, names
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            module, _, attr = name.rpartition(".")
            assert hasattr(importlib.import_module(module), attr), name
