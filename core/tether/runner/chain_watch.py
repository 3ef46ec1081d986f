"""Logical handles (``chain://...``) in a watch: each chain followed through its attempts.

A watch (:func:`tether.runner.follow.watch`, ``awatch``, ``wait_any``, ``open_watch``) that
meets a logical handle follows the chain's current attempt in the same hub subscription,
under an :class:`AttemptRef` that names both. When the attempt ends, the watch records how
(:meth:`Chains.attempt_ended <tether.runner.chains.Chains.attempt_ended>`) and moves on:
to the next attempt when the recovery policy submits one (the watch drives recovery, as
``Runner.wait`` does: after the backoff, it submits the attempt that is due), or to the
chain's final event. The caller hears one app, named by its logical handle: the attempts'
changes, a PENDING change while the next attempt is due, and one final event, the chain's.

Every method here may call a backend or lock a journal: an asyncio watch runs them in a
worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.runner.events import AppEvent
from tether.specs import AppHandle, AppState

if TYPE_CHECKING:
    from tether.runner.chains import Chains
    from tether.runner.pool import SchedulerPool
    from tether.schedulers.watch.subscription import _Following


@dataclass(frozen=True)
class AttemptRef:
    """What a subscription names one attempt of a chain by; ``str()`` is the attempt's
    handle (what reconciles and reads of the attempt use).

    Attributes:
        chain: The logical handle.
        attempt: The attempt's own handle.
    """

    chain: AppHandle
    attempt: AppHandle

    def __str__(self) -> str:
        return self.attempt


class ChainFollower:
    """The chains of one watch (see the module docstring).

    Args:
        pool: The runner's schedulers (to follow an attempt).
        chains: The runner's chains.
        sub: The watch's subscription, where attempts are followed.
    """

    def __init__(self, pool: SchedulerPool, chains: Chains, sub: _Following) -> None:
        self._pool = pool
        self._chains = chains
        self._sub = sub
        self._due: dict[AppHandle, float] = {}  # chain -> when its next attempt is due
        self._placing: dict[AppHandle, float] = {}  # chain -> when to check its placement
        self._ready: list[AppEvent] = []  # events to hand out before the subscription's
        self._last: dict[AppHandle, AppState] = {}

    @property
    def busy(self) -> bool:
        """Whether a chain waits for its next attempt, or an event is still to hand out."""
        return bool(self._due or self._ready)

    def due_in(self) -> float | None:
        """Seconds until the next attempt of some chain is due, or a placement timeout to
        check (None: none is)."""
        times = [*self._due.values(), *self._placing.values()]
        return max(0.0, min(times) - time.monotonic()) if times else None

    def add(self, chain: AppHandle) -> None:
        """Starts following a chain: its current attempt, or its state now."""
        now = self._advance(chain)
        if now is not True:
            self._ready.append(self._event(chain, final=now is None))

    def pop(self) -> AppEvent | None:
        """An event ready to hand out (the state of a chain that has no attempt to follow)."""
        return self._ready.pop(0) if self._ready else None

    def tick(self) -> None:
        """Submits the attempts that are due and follows them; enforces the placement
        timeouts that passed (a withdrawn attempt's final event moves its chain on)."""
        now = time.monotonic()
        for chain in [c for c, at in self._placing.items() if at <= now]:
            del self._placing[chain]
            self._time_placement(chain)
        for chain in [c for c, at in self._due.items() if at <= now]:
            del self._due[chain]
            if self._advance(chain) is None:
                self._ready.append(self._event(chain, final=True))

    def translate(self, ref: Hashable, ev: AppEvent) -> AppEvent:
        """The chain's event for an event of its attempt (a final one moves the chain on);
        an event of an app that is no chain's attempt is returned as it is.

        Args:
            ref: What the subscription named the app by.
            ev: Its event (a final one with the status read from its scheduler).

        Returns:
            The chain's event.
        """
        if not isinstance(ref, AttemptRef):
            return ev
        if not ev.final:
            return self._named(ref.chain, ev.state, ev)
        self._sub.unfollow(ref)
        if ev.status is not None:
            self._chains.attempt_ended(ref.chain, ref.attempt, ev.status)
        over = self._advance(ref.chain) is None
        return self._event(ref.chain, final=over)

    def _advance(self, chain: AppHandle) -> bool | None:
        """Follows what the chain is at now: True, an attempt; False, a backoff (the next
        attempt is due later); None, the chain is over."""
        attempt, delay = self._chains.step(chain)
        if attempt is not None:
            sched, app_id = self._pool.for_handle(attempt)
            self._sub.follow(sched, app_id, ref=AttemptRef(chain, attempt))
            self._time_placement(chain)
            return True
        if delay is not None:
            self._due[chain] = time.monotonic() + delay
            return False
        return None

    def _time_placement(self, chain: AppHandle) -> None:
        """Checks the chain's placement timeout, and when to check it again."""
        left = self._chains.placement_check(chain)
        if left is not None:
            self._placing[chain] = time.monotonic() + left
        else:
            self._placing.pop(chain, None)

    def _event(self, chain: AppHandle, final: bool) -> AppEvent:
        """The chain's event from its status now (final: the chain is over)."""
        status = self._chains.status(chain)
        if status is None:
            return AppEvent(chain, AppState.UNKNOWN, None, "no such logical job", final=True,
                            previous=self._last.get(chain))  # fmt: skip
        ev = AppEvent(chain, status.state, status, status.msg, final)
        return self._named(chain, status.state, ev)

    def _named(self, chain: AppHandle, state: AppState, ev: AppEvent) -> AppEvent:
        previous = self._last.get(chain)
        self._last[chain] = state
        return AppEvent(chain, state, ev.status, ev.msg, ev.final, previous)
