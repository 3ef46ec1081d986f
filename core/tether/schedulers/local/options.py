"""Run options of ``local_cwd`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tether.specs import (
    StructuredOpts,
)

log = logging.getLogger(__name__)

DEFAULT_GRACE_PERIOD_S = 5.0

@dataclass
class LocalOpts(StructuredOpts):
    """Run options of ``local_cwd``."""

    log_dir: str | None = None
    """Directory for the replicas' logs (``<log_dir>/<app_id>/<role>/<replica>/``); default:
    the app's directory under ``$TETHER_STATE_DIR/local_cwd``."""

    cwd: str | None = None
    """Working directory of the replicas (default: the current directory); a role's
    workspace directory takes precedence."""

    auto_set_cuda_visible_devices: bool = False
    """Give each replica of a GPU role its own ``CUDA_VISIBLE_DEVICES`` (consecutive devices of
    this host, ``resource.gpu`` per replica)."""

    grace_period: float = DEFAULT_GRACE_PERIOD_S
    """Seconds between SIGTERM and SIGKILL when stopping a replica's processes."""

    exit_with_launcher: bool = False
    """Cancel the app when the process that launched it exits or closes its scheduler
    (TorchX's local behaviour). By default replicas are durable: they keep running under
    their own supervisor after the launcher exits, and any process can attach to them."""

    prepend_cwd: bool = False
    """Put the replica's working directory first on its ``PATH`` (as TorchX), so an
    entrypoint such as ``train.py`` or ``run.sh`` in that directory wins; without it the
    directory is appended to ``PATH``."""
