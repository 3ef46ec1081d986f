"""podman as a real, Docker-compatible container engine for tests (no Docker daemon needed).

:class:`PodmanService` keeps everything in a temporary directory: podman's storage, a
``containers.conf`` (runc with cgroupfs, no network, fixed ulimits: what works on hosts where
crun and systemd cgroups do not), a busybox image imported as ``localhost/bb:latest`` (no
registry is reachable, so nothing is pulled) and ``podman system service`` on a unix socket,
stopped by its PID. Point Docker clients at it with :attr:`PodmanService.docker_host`
(``DOCKER_HOST``)::

    with PodmanService() as podman:  # doctest: +SKIP
        os.environ["DOCKER_HOST"] = podman.docker_host
        docker.from_env().containers.run(podman.image, ["echo", "hi"], remove=True)

The service runs through :func:`tests.e2e.infra.reaper.start_service`; its directory names its
test process (an ``owner`` file), and the containers of a killed run, whose ``conmon``
monitors run outside the service's process group, are removed with the directory at the next
session's start (:func:`reap_stale`). A clean :meth:`PodmanService.stop` removes them too.

The busybox image has a shell and the usual applets (``sh -c``, ``echo``, ``cat``...) but no
Python: enough for container steps whose command is a program of the image. Install the
packages with ``tests/e2e/infra/setup.d/20-podman.sh``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.infra.reaper import OWNER_FILE, forget, owner_alive, start_service, write_owner

DIR_PREFIX = "tether-podman-"
"""Each service's directory is ``/tmp/<DIR_PREFIX>...`` (see :func:`reap_stale`)."""
BUSYBOX_IMAGE = "localhost/bb:latest"
RUNC_CANDIDATES = ("/usr/sbin/runc", "/usr/bin/runc")
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
INSTALL_HINT = (
    "install them with tests/e2e/infra/setup.d/20-podman.sh (apt-get install -y "
    "--no-install-recommends podman runc busybox-static)"
)


def podman_argv(service_dir: Path, *args: str) -> list[str]:
    """A podman command line using the storage and settings of the service in ``service_dir``.

    Args:
        service_dir: The service's directory.
        *args: podman's arguments.

    Returns:
        The command line.
    """
    runc = _first_existing(RUNC_CANDIDATES, "runc") or "runc"
    return [
        "podman", "--root", str(service_dir / "root"), "--runroot", str(service_dir / "run"),
        "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--runtime", runc, *args,
    ]


def _podman_env(service_dir: Path) -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(service_dir / "containers.conf")}


def teardown_storage(service_dir: Path) -> None:
    """Removes the containers of a service's storage (their ``conmon`` monitors run in
    sessions of their own, outside the service's process group), the networks they joined,
    the storage's mounts and the directory. Found by the storage's paths, never by a
    process name, so other podman instances are left alone.

    Args:
        service_dir: The service's directory (its service must be stopped or gone).
    """
    env = _podman_env(service_dir)
    _remove_networks(service_dir, env)
    for args in (("rm", "--all", "--force", "--time", "0"), ("unmount", "--all")):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(podman_argv(service_dir, *args), env=env, capture_output=True,
                           timeout=120)
    shutil.rmtree(service_dir, ignore_errors=True)


def _remove_networks(service_dir: Path, env: dict[str, str]) -> None:
    """Removes the networks the service's containers joined (with the containers).

    Network definitions live in the host's shared CNI configuration directory, not in the
    service's storage, so they would outlive it (and use up podman's subnets). Networks of
    other podman instances have no container here and are left alone.
    """
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        res = subprocess.run(
            podman_argv(service_dir, "ps", "-a", "--format", "{{.Networks}}"), env=env,
            capture_output=True, text=True, timeout=60)
        names = {n for line in res.stdout.splitlines() for n in line.split(",")
                 if n.strip() and n.strip() != "podman"}
        if names:
            subprocess.run(podman_argv(service_dir, "network", "rm", "-f", *sorted(names)),
                           env=env, capture_output=True, timeout=120)


def reap_stale(root: Path = Path("/tmp")) -> list[str]:
    """Tears down the podman services whose test process is gone (a killed run): their
    containers and storage (:func:`teardown_storage`). A directory without an owner is
    left alone.

    Args:
        root: Where the services' directories are.

    Returns:
        The directories reaped.
    """
    reaped = []
    for service_dir in sorted(root.glob(f"{DIR_PREFIX}*")):
        if (service_dir / OWNER_FILE).is_file() and not owner_alive(service_dir):
            teardown_storage(service_dir)
            reaped.append(str(service_dir))
    return reaped


def tether_apps_here(api: Any) -> set[str]:
    """The ids of the tether apps this engine holds something of: a container or an event
    record (a volume; a start that failed leaves one and no container).

    An app's network is no sign of it: network definitions live in the host's shared CNI
    configuration directory, so every podman on the host lists the networks of apps that
    another podman (another test group's) runs. Clean up with these, never with a listing.

    Args:
        api: A Docker API client of the engine (``LocalDockerScheduler.api``).

    Returns:
        The app ids.
    """
    from tether.schedulers.local_docker.render import LABEL_APP_ID, LABEL_MANAGED_BY, MANAGED_BY

    mine = {"label": [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]}
    objs = [*api.containers(all=True, filters=mine),
            *((api.volumes(filters=mine) or {}).get("Volumes") or [])]
    return {str(o["Labels"][LABEL_APP_ID]) for o in objs
            if LABEL_APP_ID in (o.get("Labels") or {})}


class PodmanUnavailable(RuntimeError):
    """podman is missing or cannot run containers here; the message says why."""


def _first_existing(paths: tuple[str, ...], name: str) -> str | None:
    for p in paths:
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def missing_tools() -> list[str]:
    """The tools the service needs that this host lacks (empty when all are there)."""
    missing = []
    if shutil.which("podman") is None:
        missing.append("podman")
    if _first_existing(RUNC_CANDIDATES, "runc") is None:
        missing.append("runc")
    if _first_existing(BUSYBOX_CANDIDATES, "busybox") is None:
        missing.append("busybox-static")
    return missing


def _is_static_elf(path: str) -> bool:
    """Whether an ELF executable has no program interpreter (runs in an empty rootfs)."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
            return False
        endian = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack_from(endian + "Q", head, 0x20)
        phentsize, phnum = struct.unpack_from(endian + "HH", head, 0x36)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, = struct.unpack(endian + "I", f.read(4))
            if p_type == 3:  # PT_INTERP
                return False
    return True


def build_busybox_rootfs_tar(busybox: str, out: Path) -> Path:
    """Writes a tar of a minimal rootfs: static busybox plus a symlink per applet.

    Args:
        busybox: Path of a statically linked busybox.
        out: The tar file to write.

    Returns:
        ``out``.
    """
    if not _is_static_elf(busybox):
        raise PodmanUnavailable(
            f"{busybox} is dynamically linked and cannot run in an empty image; {INSTALL_HINT}"
        )
    applets = subprocess.run(
        [busybox, "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    with tempfile.TemporaryDirectory(prefix="bb-rootfs-") as tmp:
        root = Path(tmp)
        for d in ("bin", "tmp", "etc", "root", "proc", "sys", "dev"):
            (root / d).mkdir()
        shutil.copy2(busybox, root / "bin" / "busybox")
        for applet in applets:
            if applet != "busybox" and "/" not in applet:
                os.symlink("busybox", root / "bin" / applet)
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc" / "group").write_text("root:x:0:\n")
        with tarfile.open(out, "w") as tar:
            tar.add(str(root), arcname=".")
    return out


class PodmanService:
    """A private podman (storage, config, image, API socket) in a temporary directory.

    Args:
        image: Name to import the busybox image as.
        start_timeout: Seconds to wait for the API socket.
        insecure_registries: ``host:port`` of plain-HTTP registries podman may push to and
            pull from (a test registry on loopback).
    """

    def __init__(self, image: str = BUSYBOX_IMAGE, start_timeout: float = 30.0,
                 insecure_registries: tuple[str, ...] = ()) -> None:
        self.image = image
        self.start_timeout = start_timeout
        self.insecure_registries = tuple(insecure_registries)
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    # ---- paths and commands ------------------------------------------------------------
    @property
    def socket(self) -> Path:
        """The API socket."""
        assert self.dir is not None, "start() first"
        return self.dir / "podman.sock"

    @property
    def docker_host(self) -> str:
        """The value for ``DOCKER_HOST``."""
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        """Environment for podman commands of this service."""
        assert self.dir is not None, "start() first"
        env = {**os.environ, "CONTAINERS_CONF": str(self.dir / "containers.conf")}
        if self.insecure_registries:
            env["CONTAINERS_REGISTRIES_CONF"] = str(self.dir / "registries.conf")
        return env

    def podman(self, *args: str) -> list[str]:
        """A podman command line using this service's storage and settings."""
        assert self.dir is not None, "start() first"
        return podman_argv(self.dir, *args)

    def _run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(self.podman(*args), env=self.env(), capture_output=True, text=True,
                             timeout=timeout)
        if res.returncode != 0:
            raise PodmanUnavailable(
                f"`podman {' '.join(args)}` failed ({res.returncode}): "
                f"{(res.stderr or res.stdout).strip()[-2000:]}"
            )
        return res

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> PodmanService:
        """Imports the image, checks a container runs, starts the API service.

        Returns:
            self.

        Raises:
            PodmanUnavailable: When tools are missing or podman cannot run a container here.
        """
        missing = missing_tools()
        if missing:
            raise PodmanUnavailable(f"missing {', '.join(missing)}; {INSTALL_HINT}")
        # a short path: unix socket paths are limited to ~108 bytes
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp"))
        try:
            write_owner(self.dir)  # a killed run's containers are reaped by it (reap_stale)
            (self.dir / "containers.conf").write_text(CONTAINERS_CONF)
            (self.dir / "registries.conf").write_text("".join(
                f'[[registry]]\nlocation = "{r}"\ninsecure = true\n\n'
                for r in self.insecure_registries))
            busybox = _first_existing(BUSYBOX_CANDIDATES, "busybox")
            assert busybox is not None
            tar = build_busybox_rootfs_tar(busybox, self.dir / "rootfs.tar")
            self._run("import", str(tar), self.image)
            probe = self._run("run", "--rm", "--network", "none", self.image, "echo", "ok")
            if probe.stdout.strip() != "ok":
                raise PodmanUnavailable(f"a probe container printed {probe.stdout!r}, not 'ok'")
            self._start_service()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_service(self) -> None:
        assert self.dir is not None
        self._log = self.dir / "service.log"
        with open(self._log, "wb") as log:
            self._proc = start_service(
                self.podman("system", "service", "--time=0", self.docker_host),
                "podman-service", env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PodmanUnavailable(
                    f"podman system service exited with {self._proc.returncode}: "
                    f"{self._log.read_text(errors='replace')[-2000:]}"
                )
            if self.socket.exists() and self._ping():
                return
            time.sleep(0.1)
        raise PodmanUnavailable(
            f"podman system service did not answer on {self.socket} within "
            f"{self.start_timeout:.0f}s: {self._log.read_text(errors='replace')[-2000:]}"
        )

    def _ping(self) -> bool:
        import socket

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2.0)
                s.connect(str(self.socket))
                s.sendall(b"GET /_ping HTTP/1.0\r\nHost: podman\r\n\r\n")
                reply = s.recv(256)
            return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0]
        except OSError:
            return False

    def stop(self) -> None:
        """Stops the service (by PID) and removes the directory. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc is not None:
            forget(proc)
        if self.dir is not None:
            teardown_storage(self.dir)
            self.dir = None

    def service_log(self) -> str:
        """What the service wrote so far (for failure messages)."""
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")

    def __enter__(self) -> PodmanService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
