"""Exponential backoff with jitter, for reconnecting streams and retrying reads."""

from __future__ import annotations

import random


class Backoff:
    """Pauses that double after each failure up to a cap, each drawn at random below it.

    "Equal" jitter (a pause uniform in ``[limit/2, limit]``, where ``limit`` doubles from
    ``base`` to ``cap``) keeps many followers that lost the same apiserver from coming back
    at the same instant, and still makes each pause at least half the previous limit: a
    backend that keeps failing sees fewer and fewer requests, never a storm.

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
        return self._rng.uniform(limit / 2, limit)

    def reset(self) -> None:
        """Forgets the failures (after a success)."""
        self.failures = 0
