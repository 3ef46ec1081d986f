"""One long-lived remote ``sh`` over the ssh master: a command costs a fork on the login node,
not a new ssh session.

A multiplexed ssh session still starts an ``ssh`` client here and a login shell there
(about 20 ms each time). :class:`RemoteShell` opens one session running ``sh`` and feeds it
commands on stdin. Each command line is the quoted string of
:func:`~tether.schedulers.slurm.ssh.remote_command`; its stdout and stderr go to files in a
private temporary directory on the login node, and the shell answers with a frame::

    \\n<marker> <exit status>\\n<stdout bytes> <path>\\n<stderr bytes> <path>\\n<sum> total\\n
    <stdout><stderr>

(``marker`` is random per shell, so no output can fake a frame: the outputs come after the
header, counted in bytes). Input for a command travels base64-encoded. A shell that dies or
stops answering is closed; the transport decides whether to run the command again.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import select
import subprocess
import time
from collections.abc import Sequence

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
    """

    def __init__(self, argv: Sequence[str], log_path: str) -> None:
        self.marker = "TETHER-" + secrets.token_hex(8)
        self._log_path = log_path
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        self._buf = b""
        self._send('d=$(mktemp -d) || exit 1; trap \'rm -rf -- "$d"\' EXIT\n')

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

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            self._fill(deadline)
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data, self._buf = self._buf[:n], self._buf[n:]
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
        if input is None:
            stdin = "</dev/null"
        else:
            b64 = base64.b64encode(input.encode("utf-8", errors="surrogateescape")).decode()
            self._send(f'printf %s {b64} | base64 -d >"$d/i"\n')
            stdin = '<"$d/i"'
        # one wc for both sizes (POSIX: a line per file, then a total line), then the bytes:
        # two processes per command on the login node besides the command itself
        self._send(
            f'{command} {stdin} >"$d/o" 2>"$d/e"; tether_rc=$?; '
            f"printf '\\n%s %s\\n' {self.marker} \"$tether_rc\"; "
            'wc -c -- "$d/o" "$d/e"; cat -- "$d/o" "$d/e"\n'
        )
        try:
            while True:
                header = self._line(deadline).split()
                if len(header) == 2 and header[0].decode() == self.marker:
                    break
            rc = int(header[1])
            n_out, n_err = (int(self._line(deadline).split()[0]) for _ in range(2))
            self._line(deadline)  # the total
            out = self._take(n_out, deadline)
            err = self._take(n_err, deadline)
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
