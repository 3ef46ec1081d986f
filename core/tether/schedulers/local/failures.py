"""What a failed ``local_cwd`` replica reports: its exit, and the last lines of its stderr.

Used by the supervisor when a replica ends unsuccessfully, and by the launcher to quote a
supervisor's log when the supervisor did not start.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tether.specs.secrets import arg_secrets, mask_text, secret_values

if TYPE_CHECKING:
    from tether.schedulers.local.records import ReplicaRecord

STDERR_TAIL_LINES = 10
"""Lines of stderr quoted in a failure message."""


def exit_description(code: int) -> str:
    """``exited with code 3`` or ``was killed by signal SIGKILL (exit code -9)``.

    Args:
        code: A return code (negative: the signal that killed the process).

    Returns:
        The description.
    """
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {name} (exit code {code})"
    return f"exited with code {code}"


def stderr_tail(path: str, lines: int = STDERR_TAIL_LINES, max_bytes: int = 16384) -> str:
    """The last ``lines`` lines of a log file (decoded with replacement).

    Args:
        path: The log.
        lines: How many lines.
        max_bytes: How much of the file's end to read.

    Returns:
        The lines joined with ``\\n`` (empty when there are none).
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    kept = [ln[:500] for ln in text.splitlines() if ln.strip()]
    return "\n".join(without_launcher_report(kept)[-lines:])


_TORCHRUN_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
_TORCHRUN_LOG = re.compile(r"^[EWI]\d{4} .*torch/distributed/elastic/")


def without_launcher_report(lines: list[str]) -> list[str]:
    """The lines before torchrun's own report of a failed child, when the child wrote some.

    When a worker fails, torchrun logs it, raises ``ChildFailedError`` (a traceback of
    torchrun itself) and prints a "Root Cause" box; the last lines of stderr are then all
    torchrun's. What the user needs is the worker's own last lines, above that report.

    Args:
        lines: The log's lines.

    Returns:
        The lines up to torchrun's report (all of them when there is none, or when nothing
        comes before it).
    """
    failed = next((i for i in range(len(lines) - 1, -1, -1) if _TORCHRUN_FAILED in lines[i]),
                  None)
    if failed is None:
        return lines
    start = failed
    while start > 0 and not lines[start].startswith("Traceback (most recent call last)"):
        start -= 1
    while start > 0 and _TORCHRUN_LOG.match(lines[start - 1]):
        start -= 1
    return lines[:start] or lines


def failure_message(rep: ReplicaRecord, code: int, secrets: Iterable[str] = ()) -> str:
    """The message of a failed replica: role, replica, exit code and its last stderr lines.

    The stderr excerpt is masked (:func:`tether.specs.mask_text`): values of secret-looking
    variables of the replica's env, ``secrets`` (resolved ``Role.secrets``) and URL passwords.

    Args:
        rep: The replica.
        code: Its return code.
        secrets: Values known to be secret.

    Returns:
        The message.
    """
    msg = f"role {rep.role!r} replica {rep.replica_id} {exit_description(code)}"
    tail = stderr_tail(rep.stderr)
    if tail:
        known = [*secrets, *secret_values([rep.env]), *arg_secrets(rep.argv)]
        msg += "; last lines of stderr:\n" + mask_text(tail, known)
    return msg
