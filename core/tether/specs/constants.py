"""Sentinel strings and the tether home directory, under TorchX's names.

``MISSING``, ``NONE`` and ``UNKNOWN`` mark string fields that have no real value (an
entrypoint nobody set, an optional field left unset, a value a scheduler did not report);
:func:`TETHER_HOME` is TorchX's ``TORCHX_HOME`` for tether.
"""

from __future__ import annotations

import os
from pathlib import Path

ALL = "all"
"""Stands for every scheduler backend (TorchX's ``"*"`` backend)."""

MISSING = "<MISSING>"
"""A required string attribute (image, entrypoint...) that was not given."""

NONE = "<NONE>"
"""An optional string attribute left unset (e.g. no structured error message)."""

UNKNOWN = "<UNKNOWN>"
"""A string value the scheduler could not tell (e.g. an unknown host)."""

ENV_TETHER_HOME = "TETHER_HOME"


def TETHER_HOME(*subdir_paths: str) -> Path:
    """tether's dot-directory: ``$TETHER_HOME``, else ``~/.tether``, created if missing.

    Args:
        *subdir_paths: Path parts under it (``TETHER_HOME("conda-pack", "out")``); each
            level is created too.

    Returns:
        The directory.
    """
    home = Path(os.environ.get(ENV_TETHER_HOME) or Path.home() / ".tether").expanduser()
    path = home.joinpath(*subdir_paths)
    path.mkdir(parents=True, exist_ok=True)
    return path
