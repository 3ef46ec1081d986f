"""The durable record of a chain of attempts: :class:`Journal`, :class:`Chain`, :class:`Attempt`.

A *chain* is one logical job run as one or more attempts, each an ordinary job on some
scheduler (see :mod:`tether.runner.chains`). Its journal is one JSON file under
``<state dir>/recovery/``, named after a digest of the chain's key, mode 0600, replaced
atomically (write, fsync, rename, fsync the directory). Whoever changes it takes the
chain's lock (``flock`` on a file beside it, released by the kernel when its holder dies,
``kill -9`` included), reads it again, changes it and saves it before acting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.schedulers.local.records import app_from_json, app_to_json
from tether.specs import AppDef, RecoveryPolicy
from tether.util.paths import state_dir

DIGEST_LEN = 32
"""Hex digits of a chain key's digest: the journal's file name and the logical handle's
last part."""
_DIGEST = re.compile(rf"^[0-9a-f]{{{DIGEST_LEN}}}$")


@dataclass
class Attempt:
    """One attempt of a chain, as the journal records it.

    Attributes:
        attempt: Its number (0 for the first submission).
        job_key: Its own job identity (``<chain key>/attempt-<n>``).
        handle: Its handle, once submitted and recorded.
        state: Its final state's name, once known.
        cause: Why it failed (a :class:`~tether.specs.FailureCause` value), when it did.
        scheduler: The scheduler it runs on (None in journals of one scheduler: the
            chain's).
        refused: ``scheduler: reason`` for each scheduler that refused it for capacity
            before it was placed, or left it unplaced past the placement timeout (failover).
        submitted_at: When (epoch seconds) it was submitted to its current scheduler.
        placed: Whether it was seen placed (running or past it) on its current scheduler.
        withdrawing: Whether it is being cancelled where it waits unplaced, to be submitted
            to the next candidate once confirmed gone (the intent, recorded first).
        withdrawn: The handles of its jobs cancelled unplaced, oldest first.
    """

    attempt: int
    job_key: str
    handle: str | None = None
    state: str | None = None
    cause: str | None = None
    scheduler: str | None = None
    refused: list[str] = field(default_factory=list)
    submitted_at: float | None = None
    placed: bool = False
    withdrawing: bool = False
    withdrawn: list[str] = field(default_factory=list)


@dataclass
class Chain:
    """The journal of one chain of attempts.

    Attributes:
        chain_key: The chain's identity (given by the caller, stable across restarts).
        scheduler: The first scheduler of the chain.
        attempts: The attempts, oldest first.
        done: Whether the chain is over (succeeded, cancelled, or failed for good).
        schedulers: The schedulers to try, in order (failover); empty: ``[scheduler]``.
        app: The app as JSON (what a follower that has only the handle submits).
        cfg: The run options given, for every scheduler.
        workspace: The workspace given (its projects, or its ``--workspace`` string).
        parent_run_id: The tracking parent run, when one was given.
        cancelled: Whether the chain was cancelled (no attempt is submitted after that).
        base: The first attempt of the current run of the chain (an orchestrator's retry of
            a chain that failed for good starts a new run with the next attempt number; the
            policy counts recoveries from here).
        not_before: When (epoch seconds) the next attempt may be submitted (the backoff).
    """

    chain_key: str
    scheduler: str
    attempts: list[Attempt] = field(default_factory=list)
    done: bool = False
    schedulers: list[str] = field(default_factory=list)
    app: dict[str, Any] | None = None
    cfg: dict[str, Any] = field(default_factory=dict)
    workspace: dict[str, str] | str | None = None
    parent_run_id: str | None = None
    cancelled: bool = False
    base: int = 0
    not_before: float = 0.0

    @property
    def candidates(self) -> list[str]:
        """The schedulers to try, in order."""
        return list(self.schedulers) or [self.scheduler]

    @property
    def current(self) -> Attempt:
        """The newest attempt."""
        return self.attempts[-1]


def app_doc(app: AppDef) -> dict[str, Any]:
    """The app as JSON, with its recovery policy and checkpoint (for the journal)."""
    doc = app_to_json(app)
    policy = app.recovery
    if policy is not None:
        fields = dataclasses.asdict(policy)
        fields["on"] = [c.value for c in policy.on]
        doc["recovery"] = fields
    doc["checkpoint"] = app.checkpoint
    return doc


def app_of(doc: dict[str, Any]) -> AppDef:
    """The app recorded by :func:`app_doc`."""
    app = app_from_json(dict(doc))
    recovery = doc.get("recovery")
    return dataclasses.replace(
        app,
        recovery=RecoveryPolicy(**recovery) if recovery is not None else None,
        checkpoint=doc.get("checkpoint"),
    )


def digest_of(chain_key: str) -> str:
    """The digest naming a chain's journal.

    Args:
        chain_key: The chain's identity.

    Returns:
        ``DIGEST_LEN`` hex digits.
    """
    return hashlib.sha256(chain_key.encode()).hexdigest()[:DIGEST_LEN]


def is_digest(text: str) -> bool:
    """Whether ``text`` is a chain digest (see :func:`digest_of`)."""
    return bool(_DIGEST.match(text))


class Journal:
    """The durable record of a chain: a JSON file, replaced atomically, mode 0600.

    Args:
        chain_key: The chain's identity.
        directory: Where journals live (default ``<state dir>/recovery``).
        digest: The chain's digest instead of its key (a follower that has only the
            logical handle).
    """

    def __init__(
        self, chain_key: str | None, directory: Path | None = None, digest: str | None = None
    ) -> None:
        base = directory if directory is not None else state_dir() / "recovery"
        if digest is None:
            if chain_key is None:
                raise ValueError("Journal: give chain_key or digest")
            digest = digest_of(chain_key)
        self.chain_key = chain_key
        self.digest = digest
        self.path = base / f"{digest}.json"

    def load(self) -> Chain | None:
        """The chain as last recorded, or None when there is none."""
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        known = {f.name for f in dataclasses.fields(Chain)}
        attempts = [Attempt(**a) for a in doc.pop("attempts", [])]
        return Chain(attempts=attempts, **{k: v for k, v in doc.items() if k in known})

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

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Holds the chain's lock (one changer at a time, across processes)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def remove(self) -> None:
        """Removes the journal and its lock file (missing ones are fine)."""
        for path in (self.path, self.path.with_suffix(".lock")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
