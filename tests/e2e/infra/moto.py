"""moto's server as a real AWS endpoint on loopback, whose Batch jobs run real containers.

:class:`MotoServer` starts ``moto_server -H 127.0.0.1 -p PORT`` (the venv's, from
``moto[server,batch]``) with ``DOCKER_HOST`` pointing at a podman Docker-API socket
(:class:`tests.e2e.infra.podman.PodmanService`), so AWS Batch jobs really run as containers:
SUBMITTED -> ... -> RUNNING -> SUCCEEDED/FAILED with the container's exit code, and the
output lands in CloudWatch Logs (``/aws/batch/job``). Multi-node parallel jobs start one
container per node; the main node's address reaches the others in
``$AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``. ``POST /moto-api/reset`` clears every
service between tests (:meth:`MotoServer.reset`). SageMaker on moto records training jobs
but runs nothing. Start by hand for debugging::

    python -m tests.e2e.infra.moto      # prints the endpoint and DOCKER_HOST, Ctrl-C stops

Starting takes about 2-3 s (plus podman's image import, about 2 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.infra.kube import stop_process
from tests.e2e.infra.ports import free_port, retry_if_port_taken
from tests.e2e.infra.reaper import forget, start_service

REGION = "us-east-1"
ACCOUNT = "123456789012"
QUEUE = "tether-queue"


class MotoUnavailable(RuntimeError):
    """moto's server is not installed or did not start; the message says why."""


def moto_server_binary() -> str | None:
    """The ``moto_server`` of this interpreter's environment (or on PATH)."""
    here = Path(sys.executable).parent / "moto_server"
    return str(here) if here.exists() else shutil.which("moto_server")


class MotoServer:
    """A moto server on 127.0.0.1 (free port, temp dir), stopped by PID.

    Args:
        docker_host: ``DOCKER_HOST`` for Batch's containers (None: Batch jobs cannot run).
        image: An image the container runtime has (for the tests' jobs).
        start_timeout: Seconds to wait for the server to answer.
        podman: The :class:`~tests.e2e.infra.podman.PodmanService` behind ``docker_host``.
    """

    def __init__(self, docker_host: str | None = None, image: str = "",
                 start_timeout: float = 60.0, podman: Any = None) -> None:
        self.docker_host = docker_host
        self.image = image
        self.podman = podman
        self.start_timeout = start_timeout
        self.port = 0
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The endpoint URL (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and tether) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
        }

    def start(self) -> MotoServer:
        """Starts the server and waits until it answers.

        A start whose port another process took in the meantime is tried again on a new port
        (:func:`~tests.e2e.infra.ports.retry_if_port_taken`).

        Returns:
            self.

        Raises:
            MotoUnavailable: When ``moto_server`` is missing or does not answer.
        """
        binary = moto_server_binary()
        if binary is None:
            raise MotoUnavailable("moto_server is not installed: pip install 'moto[server,batch]'")
        return retry_if_port_taken(lambda: self._start_once(binary), "moto_server")

    def _start_once(self, binary: str) -> MotoServer:
        self.dir = Path(tempfile.mkdtemp(prefix="tether-moto-"))
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        with open(self.dir / "moto.log", "wb") as log:
            # guarded: it dies with this test process, or at the next session start
            proc = self._proc = start_service(
                [binary, "-H", "127.0.0.1", "-p", str(self.port)], "moto", env=env, stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                text = self.log()[-2000:]
                self.stop()
                raise MotoUnavailable(f"moto_server exited with {proc.returncode}: {text}")
            try:
                self._api("GET", "/moto-api/")
            except OSError:
                time.sleep(0.1)
                continue
            if proc.poll() is None:  # not another process's server on a port it lost
                return self
        self.stop()
        raise MotoUnavailable(f"moto_server did not answer within {self.start_timeout:.0f}s")

    def _api(self, method: str, path: str, body: Any = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return bytes(resp.read())

    def reset(self) -> None:
        """Clears every service's state (``POST /moto-api/reset``) and the Batch job state
        transitions (back to moto's default)."""
        self._api("POST", "/moto-api/reset")
        self.set_batch_transition({"progression": "manual", "times": 1})

    def set_batch_transition(self, transition: dict[str, Any]) -> None:
        """How Batch jobs move through SUBMITTED/PENDING/RUNNABLE/STARTING (moto's state
        manager), e.g. ``{"progression": "time", "seconds": 5}`` to hold each state."""
        self._api("POST", "/moto-api/state-manager/set-transition",
                  {"model_name": "batch::job", "transition": transition})  # fmt: skip

    def log(self) -> str:
        """What the server wrote so far."""
        if self.dir is None or not (self.dir / "moto.log").exists():
            return ""
        return (self.dir / "moto.log").read_text(errors="replace")

    def stop(self) -> None:
        """Stops the server by PID and removes its directory. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, grace=15)
            forget(proc)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def create_batch_queue(env: dict[str, str], name: str = QUEUE) -> str:
    """Creates an unmanaged compute environment and a job queue on the server.

    Args:
        env: :meth:`MotoServer.env`.
        name: The queue's name.

    Returns:
        The queue's ARN.
    """
    import boto3

    kw = {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": env["AWS_REGION"],
          "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
          "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    iam, batch = boto3.client("iam", **kw), boto3.client("batch", **kw)
    role = iam.create_role(RoleName=f"{name}-service", AssumeRolePolicyDocument="{}")["Role"]
    ce = batch.create_compute_environment(
        computeEnvironmentName=f"{name}-ce", type="UNMANAGED", state="ENABLED",
        serviceRole=role["Arn"],
    )
    queue = batch.create_job_queue(
        jobQueueName=name, state="ENABLED", priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}],
    )
    return str(queue["jobQueueArn"])


if __name__ == "__main__":  # pragma: no cover - manual debugging
    from tests.e2e.infra.podman import PodmanService

    with PodmanService() as podman, MotoServer(podman.docker_host, podman.image) as moto:
        print(f"AWS_ENDPOINT_URL={moto.endpoint} DOCKER_HOST={podman.docker_host} "
              f"image={podman.image}", flush=True)  # fmt: skip
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
