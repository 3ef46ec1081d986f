"""The one golden-file check of the test suite, with its regenerate switch.

A test renders something (a manifest, a script, a compiled pipeline) and compares it with a
file checked in under a ``golden/`` directory. When a change of the rendering is intended,
regenerate the files and review the diff::

    TETHER_REGEN_GOLDEN=1 pytest tests/schedulers tests/adapters/kfp/test_golden.py
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_REGEN = "TETHER_REGEN_GOLDEN"
"""Set to ``1`` (or ``true``/``yes``) to write the golden files instead of comparing."""


def regenerating() -> bool:
    """Whether :data:`ENV_REGEN` asks to rewrite the golden files (read on every check)."""
    return os.environ.get(ENV_REGEN, "").strip().lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class GoldenDir:
    """A directory of golden files of one kind.

    Attributes:
        root: The directory.
        suffix: Appended to a name to make the file name (``".json"``; empty when the names
            carry their own).
        end: Appended to the rendered text before it is compared or written (``"\\n"`` for
            renderers whose output has no final newline).
    """

    root: Path
    suffix: str = ""
    end: str = ""

    def check(self, name: str, text: str) -> None:
        """Assert that ``text`` is the golden file ``name`` byte for byte (or write it).

        Args:
            name: The file's name, without :attr:`suffix`.
            text: What the test rendered.
        """
        path = self.root / f"{name}{self.suffix}"
        text += self.end
        if regenerating():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"{path} is missing: run with {ENV_REGEN}=1 to create it"
        assert text == path.read_text(), (
            f"{path.name} differs from what the test rendered (if the change is intended, "
            f"regenerate with {ENV_REGEN}=1 and review the diff)"
        )
