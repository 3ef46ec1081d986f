"""Where tether keeps its durable local state."""

from __future__ import annotations

import os
from pathlib import Path

ENV_STATE_DIR = "TETHER_STATE_DIR"


def state_dir() -> Path:
    """The state directory: ``$TETHER_STATE_DIR`` or ``~/.local/state/tether``.

    Returns:
        The directory (not created).
    """
    env = os.environ.get(ENV_STATE_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "tether"
