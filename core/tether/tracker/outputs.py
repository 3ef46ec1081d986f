"""Job outputs: small named values a job publishes and its caller reads back.

The Runner gives every role ``$TETHER_OUTPUTS_URL``, an fsspec URL unique to the app
(``{root}/{scheduler}/{app_id}``). A job writes one JSON document per output there (through
:meth:`tether.tracker.AppRun.add_output` or :func:`write_output`); after the app finishes,
``Runner.outputs(handle)`` reads them back. The root comes from ``$TETHER_OUTPUTS_ROOT``, else
``[tether:outputs] url`` in ``.tetherconfig``, else ``<state dir>/outputs``: use a shared URL
(``s3://...``, a shared filesystem) when jobs run on other machines.
"""

from __future__ import annotations

import json
import os
from typing import Any

ENV_OUTPUTS_URL = "TETHER_OUTPUTS_URL"
ENV_OUTPUTS_ROOT = "TETHER_OUTPUTS_ROOT"
_SUFFIX = ".json"


def outputs_root(configured: str | None = None) -> str:
    """The root URL under which apps publish outputs.

    Args:
        configured: The ``[tether:outputs] url`` value, if any.

    Returns:
        ``$TETHER_OUTPUTS_ROOT``, else ``configured``, else ``<state dir>/outputs``.
    """
    env = os.environ.get(ENV_OUTPUTS_ROOT)
    if env:
        return env
    if configured:
        return configured
    from tether.util.paths import state_dir

    return str(state_dir() / "outputs")


def outputs_url(root: str, scheduler: str, app_id: str) -> str:
    """The outputs URL of one app.

    Args:
        root: The outputs root.
        scheduler: The scheduler's name.
        app_id: The app id (or the ``${app_id}`` macro, filled by the scheduler).

    Returns:
        ``{root}/{scheduler}/{app_id}``.
    """
    return f"{root.rstrip('/')}/{scheduler}/{app_id}"


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ValueError(
            f"output name {name!r} is not allowed: use a non-empty name without '/' that does "
            "not start with '.'"
        )


def write_output(name: str, value: Any, url: str | None = None) -> str:
    """Publishes one output of the current job.

    Args:
        name: The output's name (e.g. ``accuracy``, ``model_uri``).
        value: A JSON-serializable value.
        url: The app's outputs URL (default ``$TETHER_OUTPUTS_URL``).

    Returns:
        The URL of the written document.

    Raises:
        ValueError: For a bad name, a value that is not JSON-serializable, or no URL.
    """
    import fsspec

    _check_name(name)
    target = url or os.environ.get(ENV_OUTPUTS_URL)
    if not target:
        raise ValueError(
            f"no outputs URL: ${ENV_OUTPUTS_URL} is not set (it is set for jobs launched by "
            "tether); pass url= explicitly"
        )
    try:
        payload = json.dumps({"name": name, "value": value})
    except TypeError as e:
        raise ValueError(f"output {name!r} is not JSON-serializable: {e}") from None
    fs, path = fsspec.core.url_to_fs(target)
    fs.makedirs(path, exist_ok=True)
    final = f"{path.rstrip('/')}/{name}{_SUFFIX}"
    tmp = f"{path.rstrip('/')}/.{name}.{os.urandom(16).hex()}.tmp"
    with fs.open(tmp, "w") as f:
        f.write(payload)
    fs.mv(tmp, final)
    return final


def read_outputs(url: str) -> dict[str, Any]:
    """Reads every output published under an app's outputs URL.

    Args:
        url: The app's outputs URL.

    Returns:
        Output name to value (empty when the app published none).
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        return {}
    out: dict[str, Any] = {}
    for entry in sorted(fs.ls(path, detail=False)):
        base = entry.rsplit("/", 1)[-1]
        if base.startswith(".") or not base.endswith(_SUFFIX):
            continue
        with fs.open(entry, "r") as f:
            doc = json.load(f)
        out[doc.get("name", base[: -len(_SUFFIX)])] = doc.get("value")
    return out
