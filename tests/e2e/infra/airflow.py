"""A real Airflow 3 deployment for end-to-end tests: api-server, scheduler, dag-processor and
triggerer with the LocalExecutor on sqlite.

Airflow 3 accepts the LocalExecutor on sqlite (``airflow standalone`` runs exactly that);
sqlite is single-writer, so the components wait on each other's writes now and then, which is
fine for a handful of tasks. Everything lives in one directory (``AIRFLOW_HOME``, the DAGs
folder, tether's local state): the test's temporary directory. The api-server listens on
127.0.0.1 on a free port; workers reach its execution API there. Each component runs in its
own process group and is stopped by its PID (SIGTERM to the group, SIGKILL after a grace
period), never by name.

Auth: the SimpleAuthManager with ``simple_auth_manager_all_admins``, so the REST API hands
out an admin token without a password (``GET /auth/token``), as ``airflow standalone`` can.
All components share one JWT secret (the workers' execution-API tokens are checked by the
api-server).

A wait that times out should say what Airflow was doing: :meth:`AirflowStack.report` gives
the DAG runs' and task instances' rows (read from the metadata database, so it works while the
api-server hangs), whether each component's process is alive, the components' heartbeats and
the tail of each component's output.

Run ``python -m tests.e2e.infra.airflow DAGS_DIR`` to start one by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.reaper import forget, start_service

START_TIMEOUT_S = 300.0
STOP_GRACE_S = 15.0
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
RUN_COLUMNS = ("state", "clear_number", "queued_at", "start_date", "end_date",
               "last_scheduling_decision")
TI_COLUMNS = ("task_id", "map_index", "state", "try_number", "max_tries", "hostname", "pid",
              "queued_dttm", "start_date", "end_date", "next_method", "trigger_id")


def airflow_cli() -> list[str] | None:
    """The ``airflow`` command of this Python (``python -m airflow``: the ``airflow`` script's
    shebang may name another interpreter when the venv was copied), if installed."""
    import importlib.util

    if importlib.util.find_spec("airflow") is None:
        return None
    return [sys.executable, "-m", "airflow"]


class AirflowError(RuntimeError):
    """Airflow did not come up, or a REST call failed."""


class AirflowStack:
    """api-server + scheduler + dag-processor + triggerer on sqlite (a context manager).

    Args:
        root: A fresh directory for everything (``airflow/`` home, ``logs/``).
        dags: DAG files to copy into the DAGs folder.
        plugins: Plugin files to copy into ``$AIRFLOW_HOME/plugins``.
        env: Extra environment for every component (and the tasks they run), e.g.
            ``AIRFLOW_CONN_*`` connections or ``TETHER_STATE_DIR``.
        parallelism: The LocalExecutor's worker slots.

    Attributes:
        home: ``AIRFLOW_HOME``.
        dags_folder: The DAGs folder.
        url: The api-server's base URL.
        env: The environment the components run with.
    """

    def __init__(
        self,
        root: Path,
        dags: list[Path],
        env: Mapping[str, str] | None = None,
        parallelism: int = 8,
        plugins: Iterable[Path] = (),
    ) -> None:
        self.root = Path(root)
        self.home = self.root / "airflow"
        self.dags_folder = self.root / "dags"
        self.port = 0
        self._log_ports: list[int] = []
        self.url = ""
        self._dags = list(dags)
        self._plugins = list(plugins)
        self._extra_env = dict(env or {})
        self._parallelism = parallelism
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None
        self.env: dict[str, str] = {}

    # ---- start / stop --------------------------------------------------------------------
    def _make_env(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        # hermetic: no Airflow settings, connections or variables inherited from the test
        # process (another test module may have pointed AIRFLOW_HOME elsewhere)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(self._extra_env)
        env.update(
            {
                "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.home / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self._parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager."
                    "SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
                # the triggerer serves trigger logs to the api-server on this port
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._log_ports[0]),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._log_ports[1]),
                # quick turns: a worker that vanishes is noticed in seconds, not minutes
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": "50",
            }
        )
        return env

    def start(self) -> AirflowStack:
        """Migrates the database, starts the four components and waits until the api-server
        answers and every DAG file is parsed.

        Returns:
            Itself.

        Raises:
            AirflowError: When Airflow is missing or a component does not come up.
        """
        cli = airflow_cli()
        if cli is None:
            raise AirflowError("the airflow CLI is not installed (pip install apache-airflow)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        for src in self._dags:
            shutil.copy(src, self.dags_folder / src.name)
        if self._plugins:
            (self.home / "plugins").mkdir(exist_ok=True)
        for src in self._plugins:
            shutil.copy(src, self.home / "plugins" / src.name)
        self.port, *self._log_ports = free_ports(3)  # three distinct ports
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = self._make_env()
        migrate = subprocess.run(
            [*cli, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=300,
        )
        if migrate.returncode != 0:
            raise AirflowError(f"airflow db migrate failed:\n{migrate.stdout}\n{migrate.stderr}")
        try:
            for name in COMPONENTS:
                self.start_component(name)
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise
        return self

    def log_path(self, component: str) -> Path:
        """Where a component's output goes."""
        return self.root / f"{component}.out"

    def tail(self, n: int = 3000) -> str:
        """The end of every component's output (for failure messages)."""
        parts = []
        for name in COMPONENTS:
            path = self.log_path(name)
            if path.exists():
                parts.append(f"--- {name} ---\n{path.read_text(errors='replace')[-n:]}")
        return "\n".join(parts)

    def processes(self) -> dict[str, str]:
        """Each component's process: ``running (pid N)``, ``exited with RC (pid N)`` or
        ``stopped`` (by :meth:`stop_component`, or never started)."""
        out = {}
        for name in COMPONENTS:
            proc = self._procs.get(name)
            if proc is None:
                out[name] = "stopped"
            elif proc.poll() is None:
                out[name] = f"running (pid {proc.pid})"
            else:
                out[name] = f"exited with {proc.returncode} (pid {proc.pid})"
        return out

    def report(self, runs: Iterable[tuple[str, str]] | None = None, n: int = 2000) -> str:
        """What Airflow is doing, for a failed wait: each component's process and heartbeat,
        the DAG runs with their task instances (from the metadata database, so it works while
        the api-server hangs), the scheduler's last lines about each run and the tail of every
        component's output.

        Args:
            runs: ``(dag_id, run_id)`` pairs; ``None`` for the five latest DAG runs.
            n: Characters of each component's output to show.

        Returns:
            The report (several lines).
        """
        lines = ["What Airflow was doing:", "components: " + "; ".join(
            f"{name} {state}" for name, state in self.processes().items())]
        lines.append("heartbeats: " + self._heartbeats())
        try:
            lines += self._run_rows(runs)
        except sqlite3.Error as e:
            lines.append(f"could not read the metadata database: {e}")
        return "\n".join(lines) + "\n" + self.tail(n)

    def _heartbeats(self) -> str:
        try:
            health = self.request("GET", "/api/v2/monitor/health", auth=False, timeout=10)
        except (AirflowError, OSError, ValueError) as e:
            return f"the api-server did not answer /api/v2/monitor/health: {e}"
        parts = []
        for name, info in sorted(health.items()):
            info = info or {}
            beat = next((v for k, v in info.items() if k.startswith("latest")), None)
            parts.append(f"{name} {info.get('status')}" + (f" (last {beat})" if beat else ""))
        return "; ".join(parts)

    def _run_rows(self, runs: Iterable[tuple[str, str]] | None) -> list[str]:
        db = sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=10)
        try:
            db.execute("BEGIN")  # one snapshot: the run and its tasks as of one instant
            if runs is None:
                runs = db.execute("SELECT dag_id, run_id FROM dag_run ORDER BY id DESC LIMIT 5")
            lines = []
            for dag_id, run_id in list(runs):
                row = db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM dag_run "
                                 "WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)).fetchone()
                if row is None:
                    lines.append(f"DAG run {dag_id}/{run_id}: not in the database")
                    continue
                lines.append(f"DAG run {dag_id}/{run_id}: " + _fields(RUN_COLUMNS, row))
                for ti in db.execute(f"SELECT {', '.join(TI_COLUMNS)} FROM task_instance "
                                     "WHERE dag_id = ? AND run_id = ? ORDER BY task_id, map_index",
                                     (dag_id, run_id)):
                    lines.append(f"  task {ti[0]}[{ti[1]}]: " + _fields(TI_COLUMNS[2:], ti[2:]))
                lines += self._scheduler_lines(run_id)
            return lines
        finally:
            db.close()

    def _scheduler_lines(self, run_id: str, count: int = 8) -> list[str]:
        path = self.log_path("scheduler")
        text = path.read_text(errors="replace") if path.exists() else ""
        mine = [line[:400] for line in text.splitlines() if run_id in line][-count:]
        return [f"  the scheduler's last {len(mine)} lines about it:",
                *(f"    {line}" for line in mine)]

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise AirflowError(
                    f"airflow {name} exited with {proc.returncode}:\n{self.report(runs=())}"
                )

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        wanted = {p.stem for p in self._dags}
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                health = self.get("/api/v2/monitor/health", auth=False)
                files = {
                    Path(d.get("fileloc") or "").stem
                    for d in self.get("/api/v2/dags?limit=100")["dags"]
                }
                if (
                    health.get("scheduler", {}).get("status") == "healthy"
                    and health.get("triggerer", {}).get("status") == "healthy"
                    and wanted <= files
                ):
                    return
            except (AirflowError, OSError, KeyError):
                pass
            time.sleep(1.0)
        raise AirflowError(
            f"Airflow did not come up in {START_TIMEOUT_S:g}s:\n{self.report(runs=())}")

    def start_component(self, name: str) -> None:
        """Starts one component (``scheduler``, ``triggerer``...), its output appended to
        :meth:`log_path`.

        Args:
            name: The component.
        """
        cli = airflow_cli()
        assert cli is not None
        argv = [*cli, name]
        if name == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        with open(self.log_path(name), "ab") as out:
            self._procs[name] = start_service(
                argv, f"airflow-{name}", env=self.env, stdout=out,
                stderr=subprocess.STDOUT, cwd=self.root,
            )

    def stop_component(self, name: str) -> None:
        """Stops one component (its process group, by PID): SIGTERM, then SIGKILL.

        Args:
            name: The component.
        """
        proc = self._procs.pop(name)
        self._stop_procs({name: proc})

    def stop(self) -> None:
        """Stops every component (its process group, by PID): SIGTERM, then SIGKILL."""
        self._stop_procs(self._procs)
        self._procs.clear()

    def _stop_procs(self, procs: Mapping[str, subprocess.Popen[bytes]]) -> None:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            forget(proc)

    def __enter__(self) -> AirflowStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- the REST API --------------------------------------------------------------------
    def token(self) -> str:
        """An admin JWT (``simple_auth_manager_all_admins`` gives one without a password)."""
        if self._token is None:
            self._token = str(self.get("/auth/token", auth=False)["access_token"])
        return self._token

    def request(
        self, method: str, path: str, body: Any = None, auth: bool = True, raw: bool = False,
        timeout: float = 60.0,
    ) -> Any:
        """One REST call; returns the decoded JSON (or the text with ``raw``).

        Raises:
            AirflowError: For an HTTP error (with the server's answer).
        """
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as e:
            raise AirflowError(
                f"{method} {path} -> {e.code}: {e.read().decode(errors='replace')[:2000]}"
            ) from e
        except urllib.error.URLError as e:
            raise AirflowError(f"{method} {path}: {e}") from e
        if raw:
            return text
        return json.loads(text) if text else None

    def get(self, path: str, auth: bool = True) -> Any:
        """``GET`` (see :meth:`request`)."""
        return self.request("GET", path, auth=auth)

    def cli(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Runs ``airflow ARGS`` against this deployment (its environment)."""
        cli = airflow_cli()
        assert cli is not None
        return subprocess.run(
            [*cli, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
            cwd=self.root,
        )


def _fields(names: Iterable[str], values: Iterable[Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(names, values, strict=True))


def _main() -> None:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tether-airflow-"))
    dags = [Path(p) for p in sys.argv[1:]]
    with AirflowStack(root, dags) as stack:
        print(f"Airflow at {stack.url} (home {stack.home}); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    _main()
