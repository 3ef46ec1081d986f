"""App handles: ``{scheduler}://{session}/{app_id}``, the one id that every API takes."""

from __future__ import annotations

import re
from typing import NamedTuple

from tether.errors import SpecError

AppHandle = str

_HANDLE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_.\-]+)://(?P<session>[^/]*)/(?P<app_id>.+)$")


class MalformedAppHandleException(SpecError):
    """Raised when a string is not a valid app handle."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"{app_handle!r} is not a valid app handle; expected "
            "{scheduler}://{session}/{app_id}, e.g. local_cwd://tether/train-x1y2z3w4 "
            "(see `tether list -s SCHEDULER` for the handles of your jobs)"
        )


class ParsedAppHandle(NamedTuple):
    """The parts of an app handle (a named tuple: ``scheduler, session, app_id = ...``)."""

    scheduler_backend: str
    session_name: str
    app_id: str


def make_app_handle(scheduler_backend: str, session_name: str, app_id: str) -> AppHandle:
    """Builds an app handle.

    Args:
        scheduler_backend: The scheduler's name, e.g. ``local_cwd``.
        session_name: The runner's session name.
        app_id: The scheduler's id of the app.

    Returns:
        ``{scheduler_backend}://{session_name}/{app_id}``.
    """
    return f"{scheduler_backend}://{session_name}/{app_id}"


def parse_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """Splits an app handle into its parts.

    Args:
        app_handle: The handle.

    Returns:
        The parsed parts.

    Raises:
        MalformedAppHandleException: When the string is not a handle.
    """
    m = _HANDLE.match(app_handle.strip())
    if not m:
        raise MalformedAppHandleException(app_handle)
    return ParsedAppHandle(m.group("scheduler"), m.group("session"), m.group("app_id"))
