"""Text forms of an application's status, laid out as TorchX lays them out.

:func:`format_status` is ``AppStatus.format()`` (what ``tether status`` prints);
:func:`replica_line` renders one replica, with the details of a failure: the exit code, the
time and the message of the replica's structured error document, which may be nested
(``{"message": {"message": ..., "errorCode": ..., "extraInfo": {"timestamp": ...}}}``) or
flat (``{"message": ..., "errorCode": ..., "timestamp": ...}``). Every message is masked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tether.specs.secrets import mask_text

NOT_AVAILABLE = "<N/A>"
NONE = "<NONE>"

# a RuntimeError('On WorkerInfo(...):\n...\n') an RPC agent wraps around the real error
_RPC_ERROR = re.compile(r"(?P<exception_type>\w*)\('On WorkerInfo\(.+\):\n(.*\n)*'\)")
# an error printed inside another's message: "<msg>\nException raised from ..."
_EMBEDDED_ERROR = re.compile(r"(?P<msg>.+)\nException.*")


@dataclass
class ReplicaError:
    """What a structured error document says about a replica's failure."""

    message: str
    exit_code: Any
    timestamp: Any


def parse_error(doc_text: str) -> ReplicaError | None:
    """Reads a structured error document (nested or flat schema).

    Args:
        doc_text: The JSON text.

    Returns:
        The error, or None when the text is not JSON of either schema.
    """
    try:
        doc = json.loads(doc_text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    inner = doc.get("message")
    if isinstance(inner, dict):
        message = inner.get("message")
        extra = inner.get("extraInfo")
        timestamp = extra.get("timestamp") if isinstance(extra, dict) else None
        code = inner.get("errorCode")
    else:
        message, timestamp, code = inner, doc.get("timestamp"), doc.get("errorCode")
    if not isinstance(message, str):
        return None
    return ReplicaError(message, code, timestamp)


def wrap_error(msg: str, header: str, width: int = 80) -> str:
    """Wraps an error message under ``header`` at spaces once a line reaches ``width``.

    An RPC agent's wrapper and an embedded ``Exception raised from`` tail are cut away first.

    Args:
        msg: The message.
        header: Prefix of the first line (later lines are indented as wide).
        width: Characters per line before breaking at the next space.

    Returns:
        The wrapped text.
    """
    found = _RPC_ERROR.search(msg)
    if found:
        msg = msg[found.start() : found.end()]
    found = _EMBEDDED_ERROR.search(msg)
    if found:
        msg = found.group("msg")
    lines: list[str] = []
    start = 0
    for i, ch in enumerate(msg):
        if ch == " " and i - start >= width:
            lines.append(msg[start:i])
            start = i
    lines.append(msg[start:])
    pad = " " * len(header)
    return "\n".join((header if n == 0 else pad) + line for n, line in enumerate(lines))


def _when(timestamp: Any) -> str:
    try:
        from datetime import datetime  # only when a time is shown: not at start-up

        return str(datetime.fromtimestamp(int(timestamp)))
    except (TypeError, ValueError, OverflowError, OSError):
        return NOT_AVAILABLE


def replica_line(
    role: str, rid: int, state: str, hostname: str, exit_code: int | None, msg: str,
    structured_error_msg: str, failed: bool,
) -> str:  # fmt: skip
    """One replica's entry of :func:`format_status` (``*`` marks a role's first replica).

    Args:
        role: Its role.
        rid: Its index.
        state: Its state's name.
        hostname: Where it ran ("" if unknown).
        exit_code: Its exit code, when known.
        msg: tether's failure detail ("" if none).
        structured_error_msg: Its error document, or ``<NONE>``.
        failed: Whether it failed or was cancelled.

    Returns:
        The entry, starting with a newline.
    """
    mark = "*" if rid == 0 else " "
    head = f"\n {mark}{role}[{rid}]:"
    if structured_error_msg not in (NONE, ""):
        err = parse_error(structured_error_msg)
        if err is None:  # not a document tether can read: shown as it is
            return head + mask_text(structured_error_msg)
        code = err.exit_code if err.exit_code not in (None, "", 0) else exit_code
        return (
            f"{head}{state} (exitcode: {NOT_AVAILABLE if code is None else code})"
            f"\n        timestamp: {_when(err.timestamp)}"
            f"\n        hostname: {hostname}"
            f"\n{wrap_error(mask_text(err.message), header='        error_msg: ')}"
        )
    if not failed:
        return head + state
    if exit_code is None and not msg:
        return f"{head}{state} (no reply file)"
    text = f"{head}{state} (exitcode: {NOT_AVAILABLE if exit_code is None else exit_code})"
    if hostname:
        text += f"\n        hostname: {hostname}"
    if msg:
        text += "\n" + wrap_error(mask_text(msg), header="        error_msg: ")
    return text


def format_status(
    state: str, num_restarts: int, roles_text: str, msg: str, structured_error_msg: str,
    ui_url: str | None, cause: str = "",
) -> str:  # fmt: skip
    """TorchX's ``AppStatus.format()`` layout, with tether's ``Cause`` line after ``Msg``
    when the app failed for a known cause.

    Args:
        state: The app state's name.
        num_restarts: Restarts so far.
        roles_text: The replicas' entries (:func:`replica_line`), concatenated.
        msg: The app's message.
        structured_error_msg: The app's error document, or ``<NONE>``.
        ui_url: Its UI link, or None.
        cause: Why it failed (``Failure.describe()``), or "".

    Returns:
        The text.
    """
    body = mask_text(msg).replace("\n", "\n         ")
    return (
        "AppStatus:\n"
        f"    State: {state}\n"
        f"    Num Restarts: {num_restarts}\n"
        f"    Roles: {roles_text}\n"
        f"    Msg: {body}\n"
        + (f"    Cause: {mask_text(cause)}\n" if cause else "")
        + f"    Structured Error Msg: {mask_text(structured_error_msg)}\n"
        f"    UI URL: {ui_url}\n"
        "    "
    )
