"""Moved to :mod:`tests.e2e.infra.prefect` (kept for imports of the old path)."""

from tests.e2e.infra.prefect import (
    PrefectServer,
    ProcessWorker,
    prefect_env,
    start_server,
    start_worker,
)

__all__ = ["PrefectServer", "ProcessWorker", "prefect_env", "start_server", "start_worker"]
