"""Exponential backoff with full jitter, for reconnecting streams and retrying reads."""

from __future__ import annotations

import random


class Backoff:
    """Pauses that double after each failure up to a cap, each drawn at random below it.

    Full jitter (a pause uniform in ``[base/2, limit]``) keeps many followers that lost the
    same apiserver from coming back at the same instant.

    Args:
        base: The first pause's upper bound, in seconds.
        cap: The largest upper bound.
        rng: The random source (tests pass a seeded one).
    """

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not a secret)

    def next(self) -> float:
        """The pause after one more failure.

        Returns:
            Seconds to wait.
        """
        limit = min(self.cap, self.base * (2**self.failures))
        self.failures = min(self.failures + 1, 30)
        return self._rng.uniform(min(self.base / 2, limit), limit)

    def reset(self) -> None:
        """Forgets the failures (after a success)."""
        self.failures = 0
