"""A real image registry (the CNCF distribution registry, Debian's ``docker-registry``) on
127.0.0.1, on a free port, with its storage in a temporary directory; stopped by its PID.

Install it with ``tests/e2e/infra/setup.d/30-registry.sh``. Plain HTTP: engines must treat
it as insecure (podman: ``PodmanService(insecure_registries=[registry.address])``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from tests.e2e.infra.kube import stop_process
from tests.e2e.infra.ports import free_port, retry_if_port_taken
from tests.e2e.infra.reaper import forget, start_service

CONFIG = """\
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


class RegistryUnavailable(RuntimeError):
    """The registry binary is missing or did not start; the message says why."""


class Registry:
    """A private registry for one test session.

    Args:
        start_timeout: Seconds to wait for ``/v2/`` to answer.
    """

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, the registry part of image names."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        """Starts the registry and waits until it answers.

        A start whose port another process took in the meantime is tried again on a new port
        (:func:`~tests.e2e.infra.ports.retry_if_port_taken`).

        Returns:
            self.

        Raises:
            RegistryUnavailable: When it is not installed or does not answer.
        """
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RegistryUnavailable(
                "docker-registry is not installed; run tests/e2e/infra/setup.d/30-registry.sh")
        return retry_if_port_taken(lambda: self._start_once(binary), "docker-registry")

    def _start_once(self, binary: str) -> Registry:
        self.dir = Path(tempfile.mkdtemp(prefix="tether-registry-"))
        self.port = free_port()
        conf = self.dir / "config.yml"
        conf.write_text(CONFIG.format(root=self.dir / "data", port=self.port))
        log = open(self.dir / "registry.log", "wb")  # noqa: SIM115 - closed with the process
        proc = self._proc = start_service([binary, "serve", str(conf)], "registry", stdout=log,
                                          stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                text = (self.dir / "registry.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RegistryUnavailable(f"docker-registry exited: {text}")
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as r:
                    # and not another process's server on a port it lost
                    if r.status == 200 and proc.poll() is None:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RegistryUnavailable(f"docker-registry did not answer on {self.address}")

    def tags(self, repo: str) -> list[str]:
        """The tags of ``repo`` in the registry (empty when it has none)."""
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/{repo}/tags/list",
                                        timeout=10) as r:
                return sorted(json.load(r).get("tags") or [])
        except OSError:
            return []

    def manifest_digest(self, repo: str, tag: str) -> str:
        """The ``Docker-Content-Digest`` of ``repo:tag``'s manifest."""
        req = urllib.request.Request(
            f"http://{self.address}/v2/{repo}/manifests/{tag}", method="HEAD",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                               "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.headers["Docker-Content-Digest"])

    def stop(self) -> None:
        """Stops the registry (by PID) and removes its storage. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, grace=15)
            forget(proc)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
