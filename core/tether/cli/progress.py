"""Waiting for an app with visible progress.

On a terminal one line is redrawn in place (state, replicas running/succeeded, elapsed time,
and a spinner while the app waits to start); otherwise a plain line is printed each time the
status changes, so CI logs stay readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from tether.cli.common import status_line

if TYPE_CHECKING:
    from tether.runner import Runner
    from tether.specs import AppHandle, AppStatus


SPINNER = "|/-\\"
"""Frames of the spinner shown while an app is not running yet."""

_WAITING_STATES = ("UNSUBMITTED", "SUBMITTED", "PENDING")
SPIN_INTERVAL_S = 0.25
"""How often the live line is redrawn while the app waits to start."""


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Renders status updates to a stream.

    Args:
        handle: The app being waited for.
        stream: Where to write (default stderr).
        live: Redraw one line in place (default: when the stream is a terminal).
        quiet: Print nothing (the caller shows something else, e.g. logs).
    """

    def __init__(
        self,
        handle: str,
        stream: TextIO | None = None,
        live: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.handle = handle
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.quiet = quiet
        self.start = time.monotonic()
        self._last = ""
        self._lock = threading.Lock()
        self._drawn = False
        self._frame = 0

    def update(self, status: AppStatus | None) -> None:
        """Shows a new status.

        Args:
            status: The latest status.
        """
        if self.quiet:
            return
        line = status_line(status)
        with self._lock:
            if self.live:
                text = f"{self.handle} {line} [{_elapsed(time.monotonic() - self.start)}]"
                if status is not None and status.state.name in _WAITING_STATES:
                    text = f"{SPINNER[self._frame % len(SPINNER)]} {text}"
                    self._frame += 1
                self.stream.write("\r\x1b[2K" + text)
                self.stream.flush()
                self._drawn = True
            elif line != self._last:
                self.stream.write(f"{self.handle}: {line}\n")
                self.stream.flush()
            self._last = line

    def clear(self) -> None:
        """Removes the live line (before other output, or at the end)."""
        with self._lock:
            if self.live and self._drawn:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._drawn = False


def wait_with_progress(
    runner: Runner,
    handle: AppHandle,
    progress: Progress,
    poll_interval: float = 1.0,
) -> AppStatus | None:
    """Waits until the app is finished, showing its progress.

    Args:
        runner: The runner.
        handle: The app.
        progress: Where progress goes.
        poll_interval: Longest time between two updates.

    Returns:
        The final status (None when the app vanished).
    """
    status = runner.status(handle)
    progress.update(status)
    while status is not None and not status.is_terminal():
        waiting = progress.live and status.state.name in _WAITING_STATES
        interval = min(poll_interval, SPIN_INTERVAL_S) if waiting else poll_interval
        status = runner.wait(handle, wait_interval=interval, timeout=interval)
        progress.update(status)
    progress.clear()
    return status
