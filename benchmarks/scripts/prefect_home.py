"""An ephemeral Prefect API in a temporary home, for the Prefect benchmark scripts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def isolated_prefect_home(work: Path) -> str:
    """Points Prefect (and tether's state) at a new temporary home under ``work``: no
    analytics, warnings only, no ``PREFECT_API_URL`` (an ephemeral server is started).

    Args:
        work: Where to make the home.

    Returns:
        The home's path.
    """
    home = tempfile.mkdtemp(dir=work, prefix="prefect-home-")
    os.environ.update({
        "PREFECT_HOME": home,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": os.path.join(home, "results"),
        "PREFECT_MEMO_STORE_PATH": os.path.join(home, "memo.toml"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "TETHER_STATE_DIR": os.path.join(home, "tether-state"),
    })
    os.environ.pop("PREFECT_API_URL", None)
    return home
