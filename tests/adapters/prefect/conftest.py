"""Fixtures of the Prefect adapter tests: a real Prefect API on sqlite (started by
``tests/e2e/infra/prefect.py``), helpers to read it.

Prefect reads its settings when it is first imported, so the session fixture sets
``PREFECT_HOME`` (a scratch directory) and ``PREFECT_API_URL`` (a server started here) before
anything imports ``prefect``: the tests import it inside their functions, and
``tether.adapters.prefect`` imports it lazily.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.prefect import prefect_session


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prefect API server for the session; the process's Prefect settings point at it
    (:func:`tests.e2e.infra.prefect.prefect_session`).

    Returns:
        The API URL.
    """
    with prefect_session(tmp_path_factory.mktemp("prefect")) as api_url:
        yield api_url


@pytest.fixture
def prefect_test(prefect_api: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test that runs flows: the session's server, and jobs that find this venv's ``python``.

    Returns:
        The API URL.
    """
    bindir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))
    return prefect_api


def wait_until(check: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Polls ``check`` until it returns something truthy.

    Args:
        check: The condition.
        timeout: Seconds.
        what: Described in the failure.

    Returns:
        What ``check`` returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(0.2)


def flow_run_logs(flow_run_id: Any) -> list[str]:
    """The messages the Prefect API holds for a flow run (and its task runs), in order."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
            sort=LogSort.TIMESTAMP_ASC,
        )
    return [entry.message for entry in logs]


def wait_for_logs(flow_run_id: Any, *needles: str, timeout: float = 15.0) -> list[str]:
    """Waits until every needle appears in some log message of the flow run.

    Returns:
        The messages.
    """

    def check() -> list[str] | None:
        msgs = flow_run_logs(flow_run_id)
        return msgs if all(any(n in m for m in msgs) for n in needles) else None

    try:
        msgs: list[str] = wait_until(check, timeout, f"log lines {needles}")
        return msgs
    except AssertionError:
        raise AssertionError(
            f"log lines {needles} not all in the flow run's logs: {flow_run_logs(flow_run_id)}"
        ) from None


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
