"""Which trackers are configured: ``$TETHER_TRACKERS`` or ``.tetherconfig``; the environment wins.

``TETHER_TRACKERS=fsspec,mlflow`` names the backends; ``TETHER_TRACKER_<NAME>_CONFIG`` holds
each one's config string. Without ``$TETHER_TRACKERS`` the names come from the keys of the
``[tether:tracker]`` section of ``.tetherconfig`` and the configs from ``[tracker:<name>]
config = ...``. A config variable in the environment beats the file's value for that tracker.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tether.tracker.api import ENV_TRACKERS, tracker_config_env


def _config_file_trackers() -> dict[str, str | None]:
    from tether.config import load_config  # lazy: keeps `import tether.tracker` light

    return load_config().trackers()


def configured_trackers(
    file_trackers: Callable[[], dict[str, str | None]] | None = None,
) -> dict[str, str | None]:
    """The trackers to use and their config strings.

    Args:
        file_trackers: Reads the ``.tetherconfig`` trackers (default: the usual lookup); it is
            called only when the environment does not settle everything.

    Returns:
        Tracker name to config (None: the backend's default), in the configured order; empty
        when none is configured.
    """
    read_file = file_trackers or _config_file_trackers
    env_names = os.environ.get(ENV_TRACKERS, "")
    names = [n.strip() for n in env_names.split(",") if n.strip()]
    file_cfg: dict[str, str | None] | None = None
    if not names:
        file_cfg = read_file()
        names = list(file_cfg)
    out: dict[str, str | None] = {}
    for name in names:
        env_val = os.environ.get(tracker_config_env(name))
        if env_val:
            out[name] = env_val
            continue
        if file_cfg is None:
            file_cfg = read_file()
        out[name] = file_cfg.get(name) or None
    return out


def configured_outputs_root() -> str:
    """The outputs root: ``$TETHER_OUTPUTS_ROOT``, ``[tether:outputs] url``, or the default.

    Returns:
        The root URL (see :func:`tether.tracker.outputs.outputs_root`).
    """
    from tether.tracker.outputs import ENV_OUTPUTS_ROOT, outputs_root

    if os.environ.get(ENV_OUTPUTS_ROOT):
        return outputs_root()
    from tether.config import load_config

    return outputs_root(load_config().section("tether:outputs").get("url"))
