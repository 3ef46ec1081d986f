"""A real Prefect 3 API server and process worker for the tests: ``prefect server start`` on
sqlite, ``prefect worker start --type process``.

Used by ``tests/adapters/prefect`` (its ``conftest.py`` wraps :func:`prefect_session` in a
session fixture) and the portability matrix's Prefect cells. Services stay on: Prefect 3
records task runs from events (the task run recorder service).
One server serves the test process and the flow processes the tests start (the termination
signal tests), so no flow pays for starting a temporary server of its own. Everything lives
in a scratch ``PREFECT_HOME``; the server is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.infra.ports import free_port, retry_if_port_taken
from tests.e2e.infra.reaper import forget, start_service

START_TIMEOUT_S = 240.0  # a fresh database is migrated first: minutes on a busy 2-core machine


def prefect_env(home: Path, api_url: str | None) -> dict[str, str]:
    """The environment variables that point Prefect at a scratch home and an API.

    Args:
        home: The scratch ``PREFECT_HOME``.
        api_url: The API, or None for Prefect's temporary server.

    Returns:
        Variables to set.
    """
    env = {
        "PREFECT_HOME": str(home),
        # Prefect 3.7 derives these two from ~/.prefect, not from PREFECT_HOME
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(home / "storage"),
        "PREFECT_MEMO_STORE_PATH": str(home / "memo_store.toml"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "0.3",
    }
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


@dataclass
class PrefectServer:
    """A running server.

    Attributes:
        api_url: ``http://127.0.0.1:PORT/api``.
        proc: The server process.
        log_path: Its output.
    """

    api_url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 15 s)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        forget(self.proc)


def start_server(home: Path) -> PrefectServer:
    """Starts ``prefect server start`` and waits until ``/api/health`` answers.

    A start whose port another process took in the meantime is tried again on a new port
    (:func:`~tests.e2e.infra.ports.retry_if_port_taken`; the database is migrated by then,
    so the next start is quicker).

    Args:
        home: The scratch ``PREFECT_HOME`` (holds the sqlite database).

    Returns:
        The server.

    Raises:
        RuntimeError: When it does not become healthy (with the end of its log).
    """
    home.mkdir(parents=True, exist_ok=True)
    return retry_if_port_taken(lambda: _start_server_once(home), "prefect server")


def _start_server_once(home: Path) -> PrefectServer:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(prefect_env(home, None))
    log_path = home / "server.log"
    prefect = str(Path(sys.executable).with_name("prefect"))
    with open(log_path, "wb") as log:
        proc = start_service(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port),
             "--no-scheduler", "--no-late-runs", "--no-ui", "--analytics-off"],
            "prefect-server", stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    server = PrefectServer(f"http://127.0.0.1:{port}/api", proc, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{server.api_url}/health", timeout=2) as resp:
                # and not another process's server on a port it lost
                if resp.status == 200 and proc.poll() is None:
                    return server
        except OSError:
            time.sleep(0.3)
    server.stop()
    tail = log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"prefect server did not become healthy; its log ends with:\n{tail}")


@dataclass
class ProcessWorker:
    """A running ``prefect worker start --type process``.

    Attributes:
        pool: The work pool it polls.
        proc: The worker process (its own session: stopping it stops its flow runs too).
        log_path: Its output.
    """

    pool: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """Stops the worker (SIGTERM to its process group, then SIGKILL after 15 s)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        forget(self.proc)

    def log(self) -> str:
        """The worker's output so far."""
        return self.log_path.read_text(errors="replace")


def start_worker(home: Path, pool: str, env: dict[str, str] | None = None) -> ProcessWorker:
    """Starts a process worker polling ``pool`` (created if missing) every second.

    The worker inherits this process's environment (``PREFECT_API_URL``, ``PYTHONPATH``,
    ``TETHER_STATE_DIR``...) plus ``env``; its flow runs inherit it in turn.

    Args:
        home: A scratch directory for its log.
        pool: The work pool's name.
        env: Extra variables.

    Returns:
        The worker (already polling; flow runs may wait a poll interval to be picked up).
    """
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / f"worker-{pool}.log"
    prefect = str(Path(sys.executable).with_name("prefect"))
    child_env = dict(os.environ)
    child_env.update({"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "0"})
    child_env.update(env or {})
    with open(log_path, "wb") as log:
        proc = start_service(
            [prefect, "worker", "start", "--pool", pool, "--type", "process",
             "--name", f"{pool}-worker"],
            "prefect-worker", stdout=log, stderr=subprocess.STDOUT, env=child_env,
        )
    return ProcessWorker(pool, proc, log_path)


@contextlib.contextmanager
def prefect_session(home: Path) -> Iterator[str]:
    """A server for a test session; this process's Prefect settings point at it meanwhile.

    Sets ``PREFECT_HOME``, ``PREFECT_API_URL`` and the result/memo paths (also through
    ``temporary_settings`` when ``prefect`` was imported already: it reads its settings on
    import). At the end, sends the logs and events Prefect still queues, restores the
    environment and stops the server.

    Args:
        home: A scratch directory (the server's and the client's homes).

    Yields:
        The API URL.
    """
    server = start_server(home / "server")
    env = prefect_env(home / "client", server.api_url)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    with contextlib.ExitStack() as stack:
        if "prefect" in sys.modules:  # imported before: override its settings too
            from prefect.settings import (
                PREFECT_API_URL,
                PREFECT_HOME,
                PREFECT_MEMO_STORE_PATH,
                PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                temporary_settings,
            )

            stack.enter_context(temporary_settings(updates={
                PREFECT_API_URL: server.api_url,
                PREFECT_HOME: env["PREFECT_HOME"],
                PREFECT_RESULTS_LOCAL_STORAGE_PATH: env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"],
                PREFECT_MEMO_STORE_PATH: env["PREFECT_MEMO_STORE_PATH"],
            }))
        try:
            yield server.api_url
        finally:
            drain_prefect_workers()
            stack.close()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            server.stop()


def drain_prefect_workers() -> None:
    """Sends the logs and events Prefect still queues (before its server goes away)."""
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=5)
