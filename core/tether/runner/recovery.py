"""Running an app with its recovery policy on one scheduler: submit, wait, submit again.

:class:`RecoveringRun` follows one *chain* of attempts of an app whose ``AppDef.recovery``
says when to recover (:class:`~tether.specs.RecoveryPolicy`). When an attempt FAILED for a
cause the policy names and recoveries are left, it submits the app again as attempt N+1
(``TETHER_ATTEMPT`` in every replica) after the policy's backoff.

Crash-safe: the chain's journal (one JSON file per chain key under the state directory,
0600, replaced atomically) records the intent to submit attempt N, with that attempt's own
job key, *before* submitting it, and its handle after. A follower killed at any instant
resumes from the journal: an attempt whose handle was not recorded is looked up by its job
key first (found: re-attached; not found: submitted), so no attempt is ever submitted twice,
and a new attempt is recorded only once the previous one is terminal: never two at once.

Failover to another scheduler, and one logical handle over the attempts, are not here yet
(see ``docs/recovery.md``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.specs import AppDef, AppState, AppStatus
from tether.util.paths import state_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tether.runner.api import Runner
    from tether.specs import CfgVal

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One attempt of a chain, as the journal records it.

    Attributes:
        attempt: Its number (0 for the first submission).
        job_key: Its own job identity (``<chain key>/attempt-<n>``).
        handle: Its handle, once submitted and recorded.
        state: Its final state's name, once known.
        cause: Why it failed (a :class:`~tether.specs.FailureCause` value), when it did.
    """

    attempt: int
    job_key: str
    handle: str | None = None
    state: str | None = None
    cause: str | None = None


@dataclass
class Chain:
    """The journal of one chain of attempts.

    Attributes:
        chain_key: The chain's identity (given by the caller, stable across restarts).
        scheduler: The scheduler every attempt runs on.
        attempts: The attempts, oldest first.
        done: Whether the chain is over (succeeded, cancelled, or failed for good).
    """

    chain_key: str
    scheduler: str
    attempts: list[Attempt] = field(default_factory=list)
    done: bool = False


class Journal:
    """The durable record of a chain: a JSON file, replaced atomically, mode 0600.

    Args:
        chain_key: The chain's identity.
        directory: Where journals live (default ``<state dir>/recovery``).
    """

    def __init__(self, chain_key: str, directory: Path | None = None) -> None:
        self.chain_key = chain_key
        base = directory if directory is not None else state_dir() / "recovery"
        digest = hashlib.sha256(chain_key.encode()).hexdigest()[:32]
        self.path = base / f"{digest}.json"

    def load(self) -> Chain | None:
        """The chain as last recorded, or None when there is none."""
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        attempts = [Attempt(**a) for a in doc.get("attempts", [])]
        return Chain(doc["chain_key"], doc["scheduler"], attempts, bool(doc.get("done")))

    def save(self, chain: Chain) -> None:
        """Records the chain durably (write, fsync, rename, fsync the directory)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        data = json.dumps(dataclasses.asdict(chain), indent=1).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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
        self.journal = Journal(chain_key, journal_dir)
        self.chain_key = chain_key
        self._sleep = sleep

    def run(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        wait_interval: float = 1.0,
    ) -> RecoveryOutcome:
        """Runs (or resumes) the chain until an attempt ends for good.

        Args:
            app: The app (its ``recovery`` policy decides; None: one attempt).
            scheduler: The scheduler's name.
            cfg: Run options, the same for every attempt.
            wait_interval: Seconds between status polls.

        Returns:
            The last attempt's status and every attempt.
        """
        chain = self.journal.load() or Chain(self.chain_key, scheduler)
        while True:
            if not chain.attempts:
                self._intend(chain, 0)
            current = chain.attempts[-1]
            handle = self._submitted(chain, current, app, scheduler, cfg)
            status = self._final_status(current.attempt, handle, wait_interval)
            failure = status.cause()
            current.state = status.state.name
            current.cause = failure.cause.value if failure is not None else None
            policy = app.recovery
            recover = (
                status.state == AppState.FAILED
                and policy is not None
                and policy.recovers(failure, current.attempt)
            )
            if not recover:
                chain.done = True
                self.journal.save(chain)
                return RecoveryOutcome(status, list(chain.attempts))
            assert policy is not None
            delay = policy.delay(current.attempt)
            log.info("attempt %d of %s failed (%s); recovering in %.1fs",
                     current.attempt, self.chain_key, failure.describe() if failure else "?",
                     delay)  # fmt: skip
            self.journal.save(chain)
            self._sleep(delay)
            self._intend(chain, current.attempt + 1)

    def _final_status(self, attempt: int, handle: str, wait_interval: float) -> AppStatus:
        """The attempt's final status, confirmed by a direct read of the scheduler: a
        follower's cached view may hear that a job ended before it hears why (a Job's
        ``Failed`` condition before its pod's eviction), and the cause decides."""
        while True:
            waited = self.runner.wait(handle, wait_interval=wait_interval)
            status = self.runner.status(handle) or waited
            if status is None:
                raise RuntimeError(f"attempt {attempt} ({handle}) vanished")
            if status.is_terminal():
                return status

    def _intend(self, chain: Chain, n: int) -> None:
        chain.attempts.append(Attempt(n, f"{self.chain_key}/attempt-{n}"))
        self.journal.save(chain)  # the intent, before anything is submitted

    def _submitted(
        self,
        chain: Chain,
        current: Attempt,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None,
    ) -> str:
        """The attempt's handle: recorded, found by its job key, or submitted now."""
        if current.handle is not None:
            return current.handle
        found = self.runner.find_job(scheduler, current.job_key)
        if found is not None:  # submitted by a follower killed before recording it
            current.handle = found.app_handle
        else:
            attempt_app = dataclasses.replace(app, attempt=current.attempt)
            current.handle = self.runner.run(
                attempt_app, scheduler, cfg, job_key=current.job_key
            )
        self.journal.save(chain)
        return current.handle


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
