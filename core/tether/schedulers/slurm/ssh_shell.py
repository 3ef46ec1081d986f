"""One long-lived remote ``sh`` over the ssh master: a command costs a fork on the login node,
not a new ssh session.

A multiplexed ssh session still starts an ``ssh`` client here and a login shell there
(about 20 ms each time). :class:`RemoteShell` opens one session running ``sh`` and feeds it
commands on stdin. Each command line is the quoted string of
:func:`~tether.schedulers.slurm.ssh.remote_command` (a fixed ``sh -c`` program of tether's
runs in a subshell of this shell, not a new ``sh``); variables every command needs
(``SLURM_CONF``) are exported once when the shell starts. The command's stdout comes straight
back; its stderr goes to a file in a private temporary directory on the login node, and the
shell answers with a frame::

    <stdout>\n<marker> <exit status>\n<stderr>\n<marker>\n

where ``marker`` is a fresh random 128-bit token per command, sent only on the shell's own
stdin (the command's stdin is ``/dev/null`` or a file), so no output can fake a frame. The
stderr file is read (``cat``) only when it is not empty: a quiet command costs no process on
the login node besides its own. Input for a command travels base64-encoded. A shell that
dies or stops answering is closed; the transport decides whether to run the command again.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import select
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence

from tether.errors import BackendError


class ShellGone(BackendError):
    """The remote shell ended (connection dropped) or did not answer in time (the transport
    turns this into :class:`~.transport.ConnectionDropped` or a timeout)."""

    backend, kind = "slurm", "connection"

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class RemoteShell:
    """A remote ``sh`` reading commands from its stdin (see the module docs).

    Args:
        argv: The ssh command line that starts it (ending with the host and ``exec sh``).
        log_path: Where ssh's own stderr goes (for messages).
        env: Variables exported for every command (``SLURM_CONF``).
    """

    def __init__(
        self, argv: Sequence[str], log_path: str, env: Mapping[str, str] | None = None
    ) -> None:
        self._log_path = log_path
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        self._buf = b""
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted((env or {}).items()))
        self._send(exports + 'd=$(mktemp -d) || exit 1; trap \'rm -rf -- "$d"\' EXIT\n')

    @property
    def alive(self) -> bool:
        """Whether the ssh process still runs."""
        return self._proc.poll() is None

    def ssh_error(self) -> str:
        """The tail of what ssh printed."""
        try:
            with open(self._log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def _send(self, text: str) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(text.encode("utf-8", errors="surrogateescape"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ShellGone("the remote shell is gone") from None

    def _fill(self, deadline: float) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ShellGone("no answer within the timeout", timed_out=True)
        chunk = os.read(fd, 65536)
        if not chunk:
            raise ShellGone("the connection dropped")
        self._buf += chunk

    def _until(self, sep: bytes, deadline: float) -> bytes:
        """The bytes before the next ``sep`` (both are taken from the buffer)."""
        start = 0
        while (at := self._buf.find(sep, start)) < 0:
            start = max(0, len(self._buf) - len(sep) + 1)
            self._fill(deadline)
        data, self._buf = self._buf[:at], self._buf[at + len(sep) :]
        return data

    def run(self, command: str, input: str | None, timeout: float) -> tuple[int, str, str]:
        """Runs one command line; returns (exit status, stdout, stderr).

        Args:
            command: The quoted command line.
            input: Text for its stdin (else ``/dev/null``).
            timeout: Seconds to wait for the answer.

        Raises:
            ShellGone: When the shell ends or does not answer (then it is closed).
        """
        deadline = time.monotonic() + timeout
        marker = "TETHER-" + secrets.token_hex(16)
        if input is None:
            stdin = "</dev/null"
        else:
            b64 = base64.b64encode(input.encode("utf-8", errors="surrogateescape")).decode()
            self._send(f'printf %s {b64} | base64 -d >"$d/i"\n')
            stdin = '<"$d/i"'
        self._send(
            f'{command} {stdin} 2>"$d/e"; tether_rc=$?; '
            f"printf '\\n%s %s\\n' {marker} \"$tether_rc\"; "
            'if [ -s "$d/e" ]; then cat -- "$d/e"; fi; '
            f"printf '\\n%s\\n' {marker}\n"
        )
        try:
            out = self._until(f"\n{marker} ".encode(), deadline)
            rc = int(self._until(b"\n", deadline))
            err = self._until(f"\n{marker}\n".encode(), deadline)
        except ShellGone:
            self.close()
            raise
        text = ("utf-8", "surrogateescape")
        return rc, out.decode(*text), err.decode(*text)

    def close(self) -> None:
        """Ends the shell (its temporary directory is removed on the login node)."""
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
