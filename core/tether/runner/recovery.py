"""Running an app with its recovery policy on one scheduler, as one blocking call.

:class:`RecoveringRun` is the chain of :mod:`tether.runner.chains` driven to its end under a
key the caller chooses (an orchestrator's task id, a run name): it starts (or adopts) the
chain and follows it until an attempt ends for good. ``Runner.run`` and ``Runner.wait`` do
the same for any app with a recovery policy, under one logical handle; see
``docs/recovery.md``. The journal's types live in :mod:`tether.runner.journal`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.runner.chains import Chains
from tether.runner.journal import Attempt, Chain, Journal
from tether.specs import AppDef, AppState, AppStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from tether.runner.api import Runner
    from tether.specs import CfgVal

__all__ = ["Attempt", "Chain", "Journal", "RecoveringRun", "RecoveryOutcome", "attempts_of"]


@dataclass
class RecoveryOutcome:
    """How a chain ended.

    Attributes:
        status: The last attempt's final status.
        attempts: Every attempt, oldest first.
    """

    status: AppStatus
    attempts: list[Attempt]


class RecoveringRun:
    """Runs an app with its recovery policy on one scheduler (see the module docstring).

    Args:
        runner: The runner that submits, waits and cancels.
        chain_key: The chain's stable identity (an orchestrator's task id, a run name).
        journal_dir: Where the journal lives (default ``<state dir>/recovery``).
        sleep: How to wait the backoff (tests pass a recorder).
    """

    def __init__(
        self,
        runner: Runner,
        chain_key: str,
        journal_dir: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.runner = runner
        self.chain_key = chain_key
        self.journal = Journal(chain_key, journal_dir)
        self._chains = Chains(runner, runner.session_name, journal_dir, sleep)

    def run(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        wait_interval: float = 1.0,
    ) -> RecoveryOutcome:
        """Runs (or resumes) the chain until an attempt ends for good; a chain that is over
        already submits nothing.

        Args:
            app: The app (its ``recovery`` policy decides; None: one attempt).
            scheduler: The scheduler's name.
            cfg: Run options, the same for every attempt.
            wait_interval: Seconds between status polls.

        Returns:
            The last attempt's status and every attempt.
        """
        chain = self.journal.load()
        if chain is None or not chain.done:
            handle = self._chains.start(app, [scheduler], cfg, chain_key=self.chain_key).app_handle
            self._chains.wait(handle, wait_interval=wait_interval)
        chain = self.journal.load()
        assert chain is not None
        last = chain.current
        status = self.runner.status(last.handle) if last.handle is not None else None
        if status is None:
            status = AppStatus(AppState[last.state or "UNKNOWN"], msg="; ".join(last.refused))
        return RecoveryOutcome(status, list(chain.attempts))


def attempts_of(chain_key: str, journal_dir: Path | None = None) -> list[dict[str, Any]]:
    """The attempts of a chain as recorded (for ``describe``-like views and tests).

    Args:
        chain_key: The chain's identity.
        journal_dir: Where the journal lives.

    Returns:
        One dict per attempt, oldest first (empty when there is no journal).
    """
    chain = Journal(chain_key, journal_dir).load()
    return [dataclasses.asdict(a) for a in chain.attempts] if chain else []
