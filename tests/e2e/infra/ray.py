"""A real local Ray head (``ray start --head``) for the ``ray`` scheduler's tests.

Binds 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; without it Ray binds the
machine's external address), on free ports (GCS, dashboard, client server, agents, metrics),
with its own temporary directory, so parallel heads never collide. ``ray start`` runs in its
own process group; stopping kills that group by its id (SIGTERM, then SIGKILL), never
``ray stop`` (which stops every Ray head of the user on the machine).

Run ``python -m tests.e2e.infra.ray`` to start one and print its Jobs API address.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.reaper import forget, start_service

START_TIMEOUT_S = 180.0
START_ATTEMPTS = 3
STOP_GRACE_S = 10.0


def ray_cli() -> str | None:
    """The ``ray`` command next to this Python, if installed."""
    cand = Path(sys.executable).parent / "ray"
    return str(cand) if cand.exists() else shutil.which("ray")


def head_env() -> dict[str, str]:
    """Environment for ``ray start`` and for processes that talk to the head."""
    env = dict(os.environ)
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        # a stopped job's driver gets 15 s (Ray's default 3) to stop its replicas with SIGTERM:
        # on a loaded machine the cancel's round trip to the replica's task alone can take 3 s
        RAY_JOB_STOP_WAIT_TIME_S="15",
        # the venv's bin first: Ray's workers and job entrypoints find this Python's ray
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


class RayHead:
    """A Ray head on 127.0.0.1 (a context manager).

    Args:
        num_cpus: CPUs the head advertises.

    Attributes:
        address: The Jobs API (dashboard) address, ``http://127.0.0.1:PORT``.
        gcs_address: The GCS address, ``127.0.0.1:PORT``.
    """

    def __init__(self, num_cpus: int = 2) -> None:
        self.num_cpus = num_cpus
        self.address = ""
        self.gcs_address = ""
        self._tmp: str | None = None
        self._agent = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RayHead:
        """Starts the head and waits until the Jobs API and the node's job agent answer.

        ``ray start`` gives its raylet a fixed 30 s to register with the GCS; on a loaded
        machine that can run out, so a failed start is tried again (:data:`START_ATTEMPTS`
        times in all, fresh ports and directory each time, the reason printed to stderr).

        Returns:
            Itself.

        Raises:
            RuntimeError: When ``ray`` is missing or the head does not come up.
        """
        cli = ray_cli()
        if cli is None:
            raise RuntimeError("the ray CLI is not installed (pip install 'ray[default]')")
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once(cli)
            except RuntimeError as e:
                if attempt == START_ATTEMPTS:
                    raise
                print(f"Ray head start {attempt} of {START_ATTEMPTS} failed, trying again: "
                      f"{e}", file=sys.stderr, flush=True)
        raise AssertionError("unreachable")

    def _start_once(self, cli: str) -> RayHead:
        self._tmp = tempfile.mkdtemp(prefix="tether-ray-head-")
        gcs, dash, agent, client, agent_grpc, runtime_env, metrics = free_ports(7)
        argv = [
            cli, "start", "--head", "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}",
            f"--num-cpus={self.num_cpus}",
            f"--temp-dir={self._tmp}/ray",
            "--disable-usage-stats",
        ]
        log_path = Path(self._tmp) / "ray-start.log"
        with open(log_path, "wb") as out:
            # --block keeps `ray start` as the group's leader: stopping kills the group
            # guarded: the group dies with this test process, or at the next session start
            self._proc = start_service(
                argv, "ray-head", env=head_env(), stdout=out, stderr=subprocess.STDOUT
            )
        self.gcs_address = f"127.0.0.1:{gcs}"
        self.address = f"http://127.0.0.1:{dash}"
        self._agent = f"http://127.0.0.1:{agent}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                text = self.log_tail()
                self.stop(quiet=True)
                raise RuntimeError(f"ray start exited with {code}:\n{text}")
            # jobs are submitted through the node's dashboard agent, which starts after the
            # Jobs API answers ("No available agent to submit job" until then)
            if self._up(f"{self.address}/api/version") and \
                    self._up(f"{self._agent}/api/local_raylet_healthz"):
                return self
            time.sleep(0.5)
        text = self.log_tail()
        self.stop(quiet=True)
        raise RuntimeError(f"the Ray head did not come up in {START_TIMEOUT_S:g}s:\n{text}")

    @staticmethod
    def _up(url: str) -> bool:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, quiet: bool = False) -> None:
        """Stops every process of the head (its process group) and removes its directory.

        A head that died before (``ray start --block`` exits when a Ray process of it dies)
        prints the end of its logs to stderr first, so the test output says why.

        Args:
            quiet: Do not print the logs of a head that died (the caller reports them).
        """
        proc = self._proc
        if proc is not None and proc.poll() is not None and not quiet:
            print(f"the Ray head had exited with {proc.returncode}:\n{self.log_tail()}",
                  file=sys.stderr, flush=True)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and _group_alive(proc.pid):
                proc.poll()
                time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            forget(proc)
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the head's main logs (``ray start``, raylet, GCS, agents)."""
        if self._tmp is None:
            return ""
        out = []
        logs = Path(self._tmp) / "ray" / "session_latest" / "logs"
        for path in [Path(self._tmp) / "ray-start.log", *(logs / n for n in (
                "raylet.out", "gcs_server.out", "dashboard_agent.log", "dashboard.log"))]:
            if path.exists():
                text = path.read_text(errors="replace").splitlines()
                fatal = [ln for ln in text if " F " in ln or "Check failed" in ln][:5]
                out.append(f"--- {path.name}\n" + "\n".join(fatal + text[-lines:]))
        return "\n".join(out)

    def __enter__(self) -> RayHead:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies (a parent that does not reap) still count for killpg; look at /proc
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


def _main() -> None:
    with RayHead() as head:
        print(f"TETHER_RAY_ADDRESS={head.address}  (Ctrl-C stops the head)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    _main()
