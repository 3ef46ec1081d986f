"""``examples/apps/train_ddp.py`` whose attempts 0 and 1 are cut short after an epoch, as a
preemption would (every rank exits 143 once that epoch's checkpoint is saved); later attempts
run to the end. Used by ``tests/runner/test_recovery_ddp.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "apps"))

import train_ddp

STOP_AFTER = {"0": 1, "1": 3}
"""Attempt -> the epoch after which it is cut short."""


def after_epoch(epoch: int) -> None:
    """Ends every rank after this attempt's epoch (``os._exit``: no cleanup, as a kill)."""
    if STOP_AFTER.get(os.environ.get("TETHER_ATTEMPT", "")) == epoch:
        print(f"preempted after epoch {epoch}", flush=True)
        os._exit(143)


if __name__ == "__main__":
    sys.exit(train_ddp.main(after_epoch=after_epoch))
