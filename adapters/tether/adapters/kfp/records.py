"""What each step call of a pipeline became, collected while the pipeline is defined.

``tether kfp dryrun PIPELINE`` defines the pipeline inside :func:`recording` and prints one
line per step (:mod:`tether.adapters.kfp.dryrun`). Nothing here imports KFP.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepRecord:
    """One step call seen while a pipeline was defined (see :func:`recording`).

    Attributes:
        step: The step's name.
        component: The component's name.
        mode: ``native`` or ``launcher``.
        reason: Why that mode.
        warnings: Why pipeline values made it a launcher step.
    """

    step: str
    component: str
    mode: str
    reason: str
    warnings: tuple[str, ...] = ()


_RECORDS: contextvars.ContextVar[list[StepRecord] | None] = contextvars.ContextVar(
    "tether_kfp_step_records", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[StepRecord]]:
    """Collects a record of every step call made inside the block (in call order).

    Yields:
        The list the records are appended to.
    """
    records: list[StepRecord] = []
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)


def record(name: str, component: str, mode: str, reason: str, warnings: Sequence[str]) -> None:
    """Records a step call when a :func:`recording` block is active.

    Args:
        name: The step's name.
        component: The component's name.
        mode: The mode.
        reason: Why.
        warnings: Why pipeline values made it a launcher step.
    """
    records = _RECORDS.get()
    if records is not None:
        records.append(StepRecord(name, component, mode, reason, tuple(warnings)))
