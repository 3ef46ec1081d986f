"""Step gates of a ``local_cwd`` supervisor: hold it at a named step, so a test kills it there.

Crash safety is tested by killing a supervisor at each step of a launch (claimed, about to
fork a replica, the fork not yet ``exec``'ed, forked but not recorded...). A race against a
running supervisor hits such an instant by chance; a gate hits it every time.

A gate is a file ``gates/<step>`` in the app's directory (``apps/<app_id>/``). The
supervisor looks for the ``gates`` directory once, when it starts (one ``stat``): an app
without one, every user's app, passes every step at once and never looks again. Where it
exists, a process reaching a step whose file exists writes ``gates/<step>.held`` (its pid),
then waits until the step's file is gone. Only the user who owns the state directory can
make the directory, and only a test does.

Steps (``<role>-<k>`` names replica ``k`` of a role):

* ``claimed``: the claim (the supervisor's pid and every replica's intent) is on disk;
* ``spawn-<role>-<k>``: about to fork the replica;
* ``exec-<role>-<k>``: in the forked child, before its ``exec`` (held by the child);
* ``spawned-<role>-<k>``: the replica runs; its pid is not recorded yet;
* ``started``: every replica runs; their pids are not recorded yet.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

GATES_DIR = "gates"
"""The directory of gates in an app's directory."""
POLL_S = 0.005
"""How often a held process looks whether its gate was opened."""


class Gates:
    """The gates of one app (none, unless its directory has a ``gates`` directory).

    Args:
        app_dir: The app's directory.
    """

    def __init__(self, app_dir: Path) -> None:
        d = app_dir / GATES_DIR
        self.dir: Path | None = d if d.is_dir() else None

    def hold(self, step: str) -> None:
        """Waits while the gate of ``step`` is closed (returns at once without gates).

        Args:
            step: The step's name.
        """
        if self.dir is None:
            return
        gate = self.dir / step
        if not gate.exists():
            return
        with contextlib.suppress(OSError):
            (self.dir / f"{step}.held").write_text(str(os.getpid()))
        while gate.exists():
            time.sleep(POLL_S)

    def before_exec(self, step: str) -> Callable[[], None] | None:
        """What a forked child runs before its ``exec`` to be held at ``step``.

        Args:
            step: The step's name.

        Returns:
            None (the fork runs nothing extra) unless that gate is closed.
        """
        if self.dir is None or not (self.dir / step).exists():
            return None
        return lambda: self.hold(step)
