"""Remote access to the test Slurm cluster: an OpenSSH server and slurmrestd, on loopback.

:class:`SshServer` is a private ``sshd`` (Debian's openssh-server) on a free port of
127.0.0.1 with its own host key, accepting only the dedicated user :data:`SSH_USER` with a
key made for the session (no password, no PAM). :attr:`SshServer.known_hosts` holds its host
key, so clients check it as they would a real login node's.

:class:`SlurmRestd` is Slurm's REST daemon with ``rest_auth/jwt`` against a cluster started
with ``SlurmCluster(jwt=True)`` (``AuthAltTypes=auth/jwt``, a key made by the cluster), on a
free port, dropped to an unprivileged user as its manual asks; ``SlurmCluster.token`` mints
tokens.

Both are started by the fixtures of ``tests/e2e/infra/fixtures.py`` and stopped by PID.
Each starts through :func:`tests.e2e.infra.reaper.start_service` (a watchdog stops it when
the test process ends, also by SIGKILL; the next session's start reaps what a killed watchdog
left) and also gets ``SIGTERM`` when the thread that started it dies (``PR_SET_PDEATHSIG``),
so a killed test run leaves none behind. Install the packages with
``tests/e2e/infra/setup.d/32-slurm-remote.sh``.

The cluster's directory is opened for traversal (0711) so that the dedicated user's Slurm
commands can read ``slurm.conf`` and reach munge's socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.reaper import forget, start_service
from tests.e2e.infra.slurm import SlurmCluster, SlurmUnavailable, jwt_available

SSH_USER = "tether-ssh"
"""The dedicated login user of the test sshd (created when missing)."""
RESTD_USER = "nobody"
INSTALL_HINT = "install them with tests/e2e/infra/setup.d/32-slurm-remote.sh"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def missing_remote_tools() -> list[str]:
    """What the ssh and rest transports' tests need that this host lacks."""
    missing = [p for p in ("/usr/sbin/sshd", "/usr/sbin/slurmrestd") if not os.access(p, os.X_OK)]
    missing += [b for b in ("ssh", "ssh-keygen", "rsync") if shutil.which(b) is None]
    if not jwt_available():
        missing.append("auth_jwt.so (slurm-wlm-jwt-plugin)")
    return missing


def ensure_user(name: str = SSH_USER) -> pwd.struct_passwd:
    """The dedicated user, created (with a home directory) when missing; needs root.

    Args:
        name: The user.

    Returns:
        Its passwd entry.
    """
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"user {name!r} is missing and only root can create it")
    # password '*': no password login, but not a locked account (sshd without PAM refuses
    # locked accounts, even with a key)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", name],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return pwd.getpwnam(name)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise SlurmUnavailable(f"{what} exited with {proc.returncode}: {_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        if time.monotonic() > deadline:
            raise SlurmUnavailable(f"{what} does not listen on 127.0.0.1:{port}: {_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:].strip() if log.exists() else ""


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    forget(proc)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True, timeout=30)  # fmt: skip


class SshServer:
    """A private sshd on 127.0.0.1 for :data:`SSH_USER` (see the module docs), or for
    ``root`` by key only (the portability matrix, whose jobs run this checkout's venv, which
    only root can execute here).

    Attributes:
        port: Its port (after start).
        user: The login user.
        identity_file: The private key the user logs in with.
        known_hosts: A known_hosts file holding the server's host key.
    """

    def __init__(self, user: str = SSH_USER) -> None:
        self.user = user
        self.dir: Path | None = None
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def identity_file(self) -> str:
        """The user's private key."""
        assert self.dir is not None, "start() first"
        return str(self.dir / "id_ed25519")

    @property
    def known_hosts(self) -> str:
        """known_hosts with this server's key under ``[127.0.0.1]:PORT``."""
        assert self.dir is not None, "start() first"
        return str(self.dir / "known_hosts")

    def settings(self) -> dict[str, object]:
        """The ``ssh`` transport's settings for this server."""
        return {"transport": "ssh", "host": "127.0.0.1", "port": self.port, "user": self.user,
                "identity_file": self.identity_file, "known_hosts": self.known_hosts}  # fmt: skip

    def start(self) -> SshServer:
        """Makes the keys and config and starts sshd; returns once it listens.

        Returns:
            self.
        """
        ensure_user(self.user)
        self.dir = Path(tempfile.mkdtemp(prefix="tether-sshd-", dir="/tmp"))
        try:
            d = self.dir
            _keygen(d / "host_ed25519", "tether-test-host")
            _keygen(d / "id_ed25519", "tether-test-client")
            (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
            os.chmod(d, 0o755)  # sshd reads authorized_keys as the user
            os.chmod(d / "authorized_keys", 0o644)
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation
            self.port = free_ports(1)[0]
            host_pub = (d / "host_ed25519.pub").read_text().split()[:2]
            Path(self.known_hosts).write_text(f"[127.0.0.1]:{self.port} {' '.join(host_pub)}\n")
            (d / "sshd_config").write_text(self._config())
            log = d / "sshd.log"
            with open(log, "wb") as out:
                self._proc = start_service(
                    ["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")], "sshd",
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )  # fmt: skip
            _wait_port(self.port, self._proc, "sshd", log)
        except BaseException:
            self.stop()
            raise
        return self

    def _config(self) -> str:
        assert self.dir is not None
        d = self.dir
        return f"""\
Port {self.port}
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
AllowUsers {self.user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin {"prohibit-password" if self.user == "root" else "no"}
MaxSessions 100
MaxStartups 100
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""

    def stop(self) -> None:
        """Stops sshd and removes its directory."""
        _stop(self._proc)
        self._proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> SshServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SlurmRestd:
    """slurmrestd with ``rest_auth/jwt`` for a JWT-enabled cluster (see the module docs).

    Args:
        cluster: A running ``SlurmCluster(jwt=True)``.
    """

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.port = 0
        self.dir: Path | None = None
        self.offered: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL (``offered``: the OpenAPI plugins it loaded, after start)."""
        return f"http://127.0.0.1:{self.port}"

    def plugins(self) -> list[str]:
        """The OpenAPI plugins this build offers (``slurmrestd -s list``): the ``slurm`` API's
        (``openapi/v0.0.3x``), and the ``slurmdb`` API's (``openapi/dbv0.0.3x``) when the
        cluster has accounting (they need slurmdbd)."""
        res = subprocess.run(
            ["runuser", "-u", RESTD_USER, "--", "/usr/sbin/slurmrestd", "-s", "list"],
            capture_output=True, text=True, env=self.cluster.env(), timeout=30,
        )  # fmt: skip
        text = res.stdout + res.stderr
        prefixes = ("openapi/v", "openapi/dbv") if self.cluster.accounting else ("openapi/v",)
        return sorted({w.strip() for w in text.split() if w.strip().startswith(prefixes)})

    def start(self) -> SlurmRestd:
        """Starts slurmrestd with the plugins of :meth:`plugins`.

        Returns:
            self.
        """
        assert self.cluster.dir is not None, "start the cluster first"
        os.chmod(self.cluster.dir, 0o711)
        self.dir = Path(tempfile.mkdtemp(prefix="tether-restd-", dir="/tmp"))
        self.offered = self.plugins()
        plugins = self.offered or ["openapi/v0.0.38"]
        self.port = free_ports(1)[0]
        ent = pwd.getpwnam(RESTD_USER)
        log = self.dir / "slurmrestd.log"
        env = {**self.cluster.env(), "SLURM_JWT": "daemon"}  # rest_auth/jwt needs it set
        with open(log, "wb") as out:
            self._proc = start_service(
                ["/usr/sbin/slurmrestd", "-a", "rest_auth/jwt", "-s", ",".join(plugins),
                 "-u", str(ent.pw_uid), "-g", str(ent.pw_gid), f"127.0.0.1:{self.port}"],
                "slurmrestd",
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=_die_with_parent,
            )  # fmt: skip
        try:
            _wait_port(self.port, self._proc, "slurmrestd", log)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops slurmrestd."""
        _stop(self._proc)
        self._proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> SlurmRestd:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
