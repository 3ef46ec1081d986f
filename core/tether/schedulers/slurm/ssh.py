"""The ``ssh`` transport: Slurm's commands run on a login node through OpenSSH.

One connection per process: the first call starts an OpenSSH master (``ControlMaster``) on a
private socket (``ControlPath`` in a 0700 directory of this process); every later call is a
session multiplexed over it, without a new handshake. Commands run in one long-lived remote
``sh`` on that connection (:mod:`.ssh_shell`), so a command costs a fork on the login node, not
a new session. The master exits ``idle_s`` seconds after the last call (``ControlPersist``) or
at :meth:`SshTransport.close`, so a killed process leaves nothing behind for long. A dropped
connection is noticed at the next call and made again.

Every command crosses as one string that the remote shell splits: each argument is quoted
with :func:`shlex.quote`, so no job name, argument or environment value can run anything.
The host key is checked against ``known_hosts`` (on by default: ``StrictHostKeyChecking=yes``).

A failure of ssh itself (exit 255) becomes a :class:`~.transport.SlurmTransportError` naming
the transport, the host and what to fix (wrong host or port, refused key, unknown host key).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from typing import ClassVar

from tether.schedulers.slurm.ssh_shell import RemoteShell, ShellGone
from tether.schedulers.slurm.transport import (
    ConnectionDropped,
    SlurmTransportError,
    Transport,
    TransportCapabilities,
    TransportSettings,
)

IDLE_S = 60
CONNECT_TIMEOUT_S = 15

_DIAGNOSES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("host key verification failed", "no ed25519 host key is known", "host key is known",
      "remote host identification has changed"),
     "the host key is unknown or changed",
     "add the login node's key to known_hosts (ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts, "
     "after checking its fingerprint) or give known_hosts=FILE"),
    (("permission denied", "too many authentication failures"),
     "the login was refused",
     "check user and identity_file: the key's public half must be in the user's "
     "~/.ssh/authorized_keys on the login node"),
    (("connection refused",),
     "nothing accepts connections there",
     "check host and port (is sshd running on that port?)"),
    (("could not resolve hostname", "name or service not known"),
     "the host name does not resolve",
     "check host (and jump_host)"),
    (("connection timed out", "operation timed out", "no route to host"),
     "the host does not answer",
     "check host, port and the network (a jump_host may be needed)"),
    (("identity file", "no such file"),
     "the identity file cannot be read",
     "check identity_file"),
)  # fmt: skip


def diagnose(stderr: str) -> tuple[str, str]:
    """What went wrong and what to fix, from ssh's error text.

    Args:
        stderr: What ssh printed.

    Returns:
        (problem, hint); the problem quotes ssh when no known cause matches.
    """
    low = stderr.lower()
    for needles, problem, hint in _DIAGNOSES:
        if any(n in low for n in needles):
            return f"{problem} (ssh: {_last_line(stderr)})", hint
    if "closed by remote host" in low or "broken pipe" in low or "connection reset" in low:
        return f"the connection dropped (ssh: {_last_line(stderr)})", "retry; check the network"
    return f"ssh failed: {_last_line(stderr) or '(no output)'}", "check the ssh settings"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def remote_command(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """The one string ssh hands the remote shell: every word quoted.

    Args:
        argv: The command line.
        env: Variables to set for it (``env NAME=value ...``).

    Returns:
        The command string.
    """
    words = list(argv)
    if env:
        words = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *words]
    return shlex.join(words)


def shell_line(argv: Sequence[str]) -> str:
    """The line the long-lived remote shell runs for ``argv``.

    ``sh -c PROGRAM NAME ARG...`` (tether's own fixed programs: the job directory's file
    operations, the describe probe) runs as ``( set -- ARG...; PROGRAM )``, a subshell of that
    shell, saving a ``sh`` started per call; its arguments are quoted as everywhere. Any other
    command is :func:`remote_command` of it.

    Args:
        argv: The command line.

    Returns:
        The line.
    """
    if len(argv) >= 3 and argv[0] == "sh" and argv[1] == "-c":
        return f"( set -- {shlex.join(argv[4:])}\n{argv[2]}\n)"
    return remote_command(argv)


class SshTransport(Transport):
    """Runs the commands on ``host`` over one multiplexed OpenSSH connection.

    Args:
        settings: ``host`` (required), ``user``, ``port``, ``identity_file``, ``jump_host``,
            ``known_hosts``, ``verify_host_key``, ``slurm_conf`` (``SLURM_CONF`` there).
        idle_s: Seconds the shared connection stays up after the last call.
    """

    kind: ClassVar[str] = "ssh"
    capabilities: ClassVar[TransportCapabilities] = TransportCapabilities(
        runs_commands=True, reads_files=True, copies_workspaces=True, accounting=True
    )

    def __init__(self, settings: TransportSettings, idle_s: int = IDLE_S) -> None:
        super().__init__(settings)
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._shell_lock = threading.Lock()
        self._shell: RemoteShell | None = None
        self._dir: str | None = None
        self._ssh = shutil.which("ssh") or "ssh"

    @property
    def where(self) -> str:
        """``user@host:port`` (and the jump host)."""
        s = self.settings
        text = f"{s.user + '@' if s.user else ''}{s.host}{':' + str(s.port) if s.port else ''}"
        return text + (f" via {s.jump_host}" if s.jump_host else "")

    @property
    def control_path(self) -> str:
        """The master's socket (in a private directory of this transport)."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="tether-ssh-", dir="/tmp")  # short: sun_path
        return os.path.join(self._dir, "master")

    def options(self) -> list[str]:
        """ssh's options for every call (connection, authentication, host key checking)."""
        s = self.settings
        opts = [
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o", f"ControlPath={self.control_path}", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR",
        ]  # fmt: skip
        if s.verify_host_key:
            opts += ["-o", "StrictHostKeyChecking=yes"]
        else:
            opts += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        if s.known_hosts and s.verify_host_key:
            opts += ["-o", f"UserKnownHostsFile={s.known_hosts}"]
        if s.port:
            opts += ["-p", str(int(s.port))]
        if s.user:
            opts += ["-l", s.user]
        if s.identity_file:
            opts += ["-i", s.identity_file, "-o", "IdentitiesOnly=yes"]
        if s.jump_host:
            opts += ["-J", s.jump_host]
        return opts

    def base_argv(self) -> list[str]:
        """``ssh OPTIONS`` without the host (rsync's ``-e`` uses it too)."""
        return [self._ssh, *self.options()]

    def _master_alive(self) -> bool:
        res = subprocess.run(
            [*self.base_argv(), "-O", "check", "--", str(self.settings.host)],
            capture_output=True, text=True, timeout=CONNECT_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return res.returncode == 0

    def connect(self) -> None:
        """Starts the shared connection unless it is up.

        Raises:
            SlurmTransportError: Naming the host and what to fix.
        """
        with self._lock:
            if os.path.exists(self.control_path) and self._master_alive():
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control_path)  # a dead master's socket
            argv = [
                *self.base_argv(), "-o", "ControlMaster=yes",
                "-o", f"ControlPersist={self.idle_s}", "-N", "-f", "--", str(self.settings.host),
            ]  # fmt: skip
            try:
                res = subprocess.run(
                    argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                    timeout=CONNECT_TIMEOUT_S * 2 + 5,
                )  # fmt: skip
            except FileNotFoundError:
                raise SlurmTransportError(
                    "ssh",
                    self.where,
                    "the ssh program is not installed here",
                    "install OpenSSH's client (openssh-client)",
                ) from None
            except subprocess.TimeoutExpired:
                raise SlurmTransportError(
                    "ssh",
                    self.where,
                    "no connection within the timeout",
                    "check host, port and the network",
                ) from None
            if res.returncode != 0:
                problem, hint = diagnose(res.stderr)
                raise SlurmTransportError("ssh", self.where, problem, hint)

    def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout: float | None = None,
        retry: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` on the login node over the shared connection (every word quoted).

        With ``retry``, a command whose connection dropped is run once more over a new one
        (for commands that change nothing, or change it idempotently).

        Raises:
            SlurmTransportError: When the login node cannot be reached.
            ConnectionDropped: When the connection broke while the command ran.
        """
        command = shell_line(argv)  # SLURM_CONF: exported when the shell starts
        wait = timeout or self.settings.timeout
        with self._shell_lock:
            for attempt in (0, 1):
                shell = self._open_shell(fresh=attempt > 0)
                try:
                    rc, out, err = shell.run(command, input, wait)
                except ShellGone as e:
                    self._shell = None
                    if e.timed_out:
                        raise subprocess.TimeoutExpired(list(argv), wait) from None
                    if retry and attempt == 0:
                        continue  # connect again (or say why it cannot)
                    problem, hint = diagnose(shell.ssh_error() or str(e))
                    raise ConnectionDropped("ssh", self.where, problem, hint) from None
                return subprocess.CompletedProcess(list(argv), rc, out, err)
        raise AssertionError("unreachable")

    def _open_shell(self, fresh: bool) -> RemoteShell:
        """The remote shell, started (after the master: its errors are diagnosed) if needed."""
        if self._shell is not None and self._shell.alive and not fresh:
            return self._shell
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        self.connect()
        env = {"SLURM_CONF": self.settings.slurm_conf} if self.settings.slurm_conf else None
        self._shell = RemoteShell(
            [*self.base_argv(), "-T", "-o", "ControlMaster=auto",
             "-o", f"ControlPersist={self.idle_s}", "--", str(self.settings.host), "exec sh"],
            os.path.join(os.path.dirname(self.control_path), "shell.log"), env,
        )  # fmt: skip
        return self._shell

    def close(self) -> None:
        """Stops the remote shell and the shared connection; removes its directory."""
        with self._shell_lock:
            if self._shell is not None:
                self._shell.close()
                self._shell = None
        if self._dir is None:
            return
        if os.path.exists(self.control_path):
            with contextlib.suppress(Exception):
                subprocess.run(
                    [*self.base_argv(), "-O", "exit", "--", str(self.settings.host)],
                    capture_output=True, timeout=10, stdin=subprocess.DEVNULL,
                )  # fmt: skip
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

