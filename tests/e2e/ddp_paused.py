"""``examples/apps/train_ddp.py`` whose attempts 0 and 1 stop and wait once an epoch's checkpoint
is saved, so that the test can evict their pod there; later attempts run to the end. Rank 0
writes ``paused-<attempt>`` next to the checkpoint when its attempt waits: the first and the
last epoch it trained. Used by
``tests/e2e/test_kubernetes_ddp_recovery_e2e.py``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "apps"))

import train_ddp

FIRST: list[int] = []
"""The first epoch this run trained (after the checkpoint it resumed from)."""
PAUSE_AFTER = {"0": 1, "1": 3}
"""Attempt -> the epoch after which it waits to be evicted (or after any later epoch: a pod
the Job controller put in the evicted one's place, before tether stopped it, waits too)."""


def after_epoch(epoch: int) -> None:
    """Waits, every rank, for the eviction once this attempt's epoch is checkpointed."""
    attempt = os.environ.get("TETHER_ATTEMPT", "")
    FIRST[:] = FIRST or [epoch]
    if attempt in PAUSE_AFTER and epoch >= PAUSE_AFTER[attempt]:
        if os.environ.get("RANK") == "0":
            marker = Path(os.environ["TETHER_CHECKPOINT"]) / f"paused-{attempt}"
            marker.write_text(f"{FIRST[0]} {epoch}")
            print(f"waiting to be evicted after epoch {epoch}", flush=True)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    sys.exit(train_ddp.main(after_epoch=after_epoch))
