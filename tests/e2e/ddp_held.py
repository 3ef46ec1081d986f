"""``examples/apps/train_ddp.py`` whose attempts 0 and 1 stop after an epoch and wait there,
every rank, until the infrastructure fails under them (the test sets their node DOWN, or
preempts them); later attempts run to the end. Rank 0 writes ``held-<attempt>`` next to the
checkpoint once that epoch's checkpoint is saved, so the test fails the job at a known
point. Used by ``tests/e2e/test_slurm_recovery_ddp_e2e.py``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "apps"))

import train_ddp

HOLD_AFTER = {"0": 1, "1": 3}
"""Attempt -> the epoch after which it waits to be failed."""


def after_epoch(epoch: int) -> None:
    """Waits (for good) after this attempt's epoch; rank 0 says so in a file first."""
    attempt = os.environ.get("TETHER_ATTEMPT", "")
    if HOLD_AFTER.get(attempt) != epoch:
        return
    print(f"holding after epoch {epoch}", flush=True)
    if train_ddp.is_rank0():
        marker = Path(os.environ["TETHER_CHECKPOINT"]) / f"held-{attempt}"
        marker.write_text(f"{epoch}\n")
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(train_ddp.main(after_epoch=after_epoch))
