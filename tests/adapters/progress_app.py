"""A job that reports progress, then waits for the test to release it (live progress tests).

The job reports ``1/4`` with ``loss=0.5``, then blocks until the gate file exists, then
reports ``4/4`` and exits 0. A test releases it only once it has seen the first report in the
orchestrator, so seeing it proves the report arrived while the job ran.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from tether.specs import AppDef, Role

FIRST = "1/4 (25%) loss=0.5"
"""The first report as ``Progress.format()`` writes it."""

LAST = "4/4 (100%) loss=0.125"
"""The last report (the ETA follows it)."""

SCRIPT = """
import os, sys, time
from tether.runtime import report
report(step=1, total=4, loss=0.5)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
report(step=4, total=4, loss=0.125)
"""


def training(gate: str) -> AppDef:
    """The app: reports 1/4, waits for ``gate`` to exist, reports 4/4.

    Args:
        gate: The file whose creation lets the job finish.

    Returns:
        The app.
    """
    return AppDef("training", roles=[Role(
        "trainer", image="python:3.12", entrypoint=sys.executable, args=["-c", SCRIPT, gate],
    )])


def training_in_image(gate: str, image: str = "localhost/tether:e2e") -> AppDef:
    """:func:`training` as a container step (a KFP native step): ``python`` of an image that
    has tether.

    Args:
        gate: The file whose creation lets the job finish.
        image: The image.

    Returns:
        The app.
    """
    return AppDef("progress", roles=[Role(
        "trainer", image=image, entrypoint="python", args=["-c", SCRIPT, gate],
    )])


def release_when(seen: Callable[[], bool], gate: Path, patience: float = 300.0) -> bool:
    """Creates ``gate`` once ``seen()`` is true (or ``patience`` seconds passed: the job must
    end either way, so the test never leaves it running).

    Args:
        seen: Whether the test has seen the first report in the orchestrator.
        gate: The job's gate file.
        patience: Longest wait, a hang guard only.

    Returns:
        Whether the report was seen before the job was released.
    """
    end = time.monotonic() + patience
    try:
        while time.monotonic() < end:
            if seen():
                return True
            time.sleep(0.1)
        return False
    finally:
        gate.touch()
