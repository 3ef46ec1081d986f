"""Shared pieces of the subcommands: errors, exit codes, rendering, time and handle parsing."""

from __future__ import annotations

import argparse
import sys

from tether.errors import TetherError

# typing, dataclasses, json, re and datetime are imported where used: `tether --help` needs none
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any, TextIO

    from tether.runner import Runner
    from tether.specs import AppDef, AppState, AppStatus

EXIT_OK = 0
EXIT_FAILED = 1
"""The app FAILED, or a user error."""
EXIT_USAGE = 2
"""Command-line usage error (argparse)."""
EXIT_CANCELLED = 3
"""The app was CANCELLED."""
EXIT_UNKNOWN = 4
"""The app ended in no known final state."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""


class CLIError(TetherError):
    """A user mistake: printed as one line, exit code 1 (or ``code``)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def exit_code_for(state: AppState | None) -> int:
    """The CLI's exit code for an app's final state.

    Args:
        state: The state (None when the app vanished).

    Returns:
        0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 anything else.
    """
    from tether.specs import AppState

    if state == AppState.SUCCEEDED:
        return EXIT_OK
    if state == AppState.FAILED:
        return EXIT_FAILED
    if state == AppState.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_UNKNOWN


def get_runner() -> Runner:
    """The CLI's runner (imports the runner lazily, keeping ``tether --help`` fast)."""
    from tether.runner import get_runner as _get_runner

    return _get_runner()


def _plain(value: Any) -> Any:
    import dataclasses
    from enum import Enum

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value if not isinstance(value, int) else value.name
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def app_to_dict(app: AppDef) -> dict[str, Any]:
    """The AppDef as plain data, with secret-looking env values masked.

    Args:
        app: The app.

    Returns:
        JSON-serializable data.
    """
    from tether.specs.secrets import app_secret_values, mask_args, mask_env, mask_text

    doc = _plain(app)
    for role, data in zip(app.roles, doc.get("roles", [])):
        secrets = app_secret_values([role])
        data["env"] = mask_env(role.env)
        data["args"] = mask_args(role.args, secrets)
        data["entrypoint"] = mask_text(role.entrypoint, secrets)
    return dict(doc)


def format_app(app: AppDef) -> str:
    """Readable rendering of an AppDef (secrets masked).

    Args:
        app: The app.

    Returns:
        The text (JSON, indented).
    """
    import json

    return json.dumps(app_to_dict(app), indent=2, sort_keys=False)


_REL = r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$"
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """Parses ``--since``/``--until``: an ISO time, or a duration ago (``30s``, ``5m``, ``2h``).

    Args:
        text: The value.
        now: The reference time for durations (default: now).

    Returns:
        An aware datetime.

    Raises:
        CLIError: When the value is neither.
    """
    import re
    from datetime import datetime, timedelta, timezone

    now = now or datetime.now(timezone.utc)
    m = re.match(_REL, text, re.IGNORECASE)
    if m:
        return now - timedelta(**{_UNITS[m.group(2).lower()]: float(m.group(1))})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CLIError(
            f"cannot read time {text!r}: use an ISO time (2024-05-01T12:00:00) or a duration "
            "ago (30s, 5m, 2h, 1d)"
        ) from None
    if value.tzinfo is None:
        value = value.astimezone()
    return value


def status_line(status: AppStatus | None) -> str:
    """``STATE (role: 2 running, 1 succeeded)``: a compact status for progress displays.

    Args:
        status: The status.

    Returns:
        The text.
    """
    if status is None:
        return "UNKNOWN (the scheduler does not know the app)"
    parts: list[str] = []
    for rs in status.roles:
        counts: dict[str, int] = {}
        for rep in rs.replicas:
            counts[rep.state.name.lower()] = counts.get(rep.state.name.lower(), 0) + 1
        if counts:
            parts.append(f"{rs.role}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"{status.state.name}{detail}"


def report_final(handle: str, status: AppStatus | None) -> None:
    """Prints how a waited-for app ended: ``HANDLE STATE`` on stdout, details on stderr.

    Args:
        handle: The app.
        status: Its final status (None when it vanished).
    """
    if status is None:
        eprint(f"tether: {handle} disappeared before it finished")
        return
    print(f"{handle} {status.state.name}", flush=True)
    if status.state.name != "SUCCEEDED":
        eprint(format_status(status))


def format_status(status: AppStatus, roles: list[str] | None = None) -> str:
    """``status.format()``, without the app's message where a replica's says the same.

    Schedulers often make the app's message from its first failed replica's (exit code, last
    lines of stderr); shown under the replica, it is not repeated at the top.

    Args:
        status: The status.
        roles: Only these roles (all when None).

    Returns:
        The text.
    """
    import dataclasses

    replica_msgs = {rep.msg.strip() for rs in status.roles for rep in rs.replicas if rep.msg}
    if status.msg and status.msg.strip() in replica_msgs:
        status = dataclasses.replace(status, msg="")
    return status.format(filter_roles=roles)


def eprint(*items: object, file: TextIO | None = None) -> None:
    """Prints to stderr (messages for people; stdout is kept for results)."""
    print(*items, file=file or sys.stderr, flush=True)


def add_handle_argument(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """Adds the ``app_handle`` positional.

    Args:
        parser: The command's parser.
        many: Accept several handles.
    """
    parser.add_argument(
        "app_handle",
        nargs="+" if many else None,
        metavar="APP_HANDLE",
        help="{scheduler}://{session}/{app_id}, as printed by `tether run` and `tether list`",
    )


def check_handle(handle: str) -> str:
    """Validates an app handle's syntax (a clear error instead of a scheduler's).

    Args:
        handle: The handle.

    Returns:
        The handle, stripped.

    Raises:
        CLIError: When malformed.
    """
    from tether.specs import MalformedAppHandleException, parse_app_handle

    try:
        parse_app_handle(handle)
    except MalformedAppHandleException as e:
        raise CLIError(str(e)) from None
    return handle.strip()
