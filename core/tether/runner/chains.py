"""One logical job over attempts and schedulers: recovery and failover behind the Runner.

An app with a :class:`~tether.specs.RecoveryPolicy`, or run on an ordered list of
schedulers, runs as a *chain*: one logical job whose handle
(``chain://<session>/<app name>-<digest>``) stays the same while its attempts, each an
ordinary job on some scheduler, come and go. :class:`Chains` is the collaborator the
:class:`~tether.runner.api.Runner` hands such handles to: ``status``, ``wait``, ``cancel``,
``describe``, logs and outputs act on the current attempt.

Who recovers: the follower. :meth:`Chains.wait` (``Runner.wait``, ``tether run --wait``,
``tether wait``, the orchestrator adapters) waits for the current attempt and, when it
FAILED for a cause the policy names and recoveries are left, submits the next attempt after
the backoff. ``status`` alone never submits: it shows a chain waiting for its next attempt
as PENDING.

Failover: an attempt is submitted to the first scheduler of the list; one that refuses it
for capacity (:class:`~tether.schedulers.errors.CapacityError`) is recorded and the next one
tried. Application failures never fail over.

Crash-safe: every change is made under the chain's lock (:meth:`Journal.lock`) and recorded
before it is acted on: the intent to submit attempt N to a scheduler, with the attempt's own
job key, is saved before submitting. A follower killed at any instant, started again (by the
handle, or by running the app again with the same job key), finds an attempt whose handle was
not recorded by its job key first (found: adopted; not found: submitted), so no attempt is
submitted twice, and attempt N+1 is only intended once attempt N is terminal.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.runner import placement
from tether.runner.journal import Attempt, Chain, Journal, app_doc, app_of, is_digest
from tether.runner.logical import (
    CHAIN_SCHEME,
    UnknownRunOptionError,
    candidate_cfg,
    check_candidates_can_run,
)
from tether.runner.reattach import ExistingJob, RunOutcome
from tether.schedulers.errors import CapacityError
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppState,
    AppStatus,
    CfgVal,
    RecoveryPolicy,
    make_app_handle,
    parse_app_handle,
)

if TYPE_CHECKING:
    from tether.schedulers.capabilities import Capabilities
    from tether.specs import runopts
    from tether.workspace import Workspace

log = logging.getLogger(__name__)

class AttemptRunner(Protocol):
    """What :class:`Chains` needs of the :class:`~tether.runner.api.Runner` (which it
    cannot import: the Runner holds it)."""

    def scheduler_run_opts(self, scheduler: str) -> runopts: ...

    def scheduler_capabilities(self, scheduler: str) -> Capabilities: ...

    def dryrun(
        self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal] | None = ...,
        workspace: Workspace | str | None = ..., parent_run_id: str | None = ...,
        job_key: str | None = ...,
    ) -> AppDryRunInfo[Any]: ...  # fmt: skip

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle: ...

    def find_job(
        self, scheduler: str, job_key: str, cfg: Mapping[str, CfgVal] | None = ...
    ) -> ExistingJob | None: ...

    def status(self, app_handle: AppHandle) -> AppStatus | None: ...

    def wait(
        self, app_handle: AppHandle, wait_interval: float = ..., timeout: float | None = ...
    ) -> AppStatus | None: ...

    def cancel(self, app_handle: AppHandle) -> None: ...

    def delete(self, app_handle: AppHandle) -> None: ...


@dataclass
class _Given:
    """What this process's caller gave for a chain (used instead of the journal's copy)."""

    app: AppDef
    workspace: Workspace | str | None
    parent_run_id: str | None


class Chains:
    """The runner's chains (see the module docstring).

    Args:
        runner: The runner that submits, follows and cancels the attempts.
        session: The session name, part of every logical handle.
        journal_dir: Where journals live (default ``<state dir>/recovery``).
        sleep: How to wait the backoff (tests pass a recorder).
        clock: The wall clock (for a backoff that outlives its follower).
    """

    def __init__(
        self,
        runner: AttemptRunner,
        session: str,
        journal_dir: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._runner = runner
        self._session = session
        self._dir = journal_dir
        self._sleep = sleep
        self._clock = clock
        self._given: dict[str, _Given] = {}

    # ---- identity ------------------------------------------------------------------------
    def handle_of(self, journal: Journal, app_name: str) -> AppHandle:
        """The logical handle of a chain."""
        return make_app_handle(CHAIN_SCHEME, self._session, f"{app_name}-{journal.digest}")

    def journal(self, app_handle: AppHandle) -> Journal | None:
        """The journal a logical handle names (None when the handle names none)."""
        app_id = parse_app_handle(app_handle).app_id
        digest = app_id.rsplit("-", 1)[-1]
        return Journal(None, self._dir, digest=digest) if is_digest(digest) else None

    def _load(self, app_handle: AppHandle) -> tuple[Journal, Chain] | None:
        journal = self.journal(app_handle)
        chain = journal.load() if journal is not None else None
        if journal is None or chain is None or not chain.attempts:
            return None
        return journal, chain

    # ---- start ---------------------------------------------------------------------------
    def start(
        self,
        app: AppDef,
        schedulers: Sequence[str],
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: Workspace | str | None = None,
        parent_run_id: str | None = None,
        job_key: str | None = None,
        chain_key: str | None = None,
    ) -> RunOutcome:
        """Starts a chain, or adopts the one already started with the same key.

        A chain still going is adopted (nothing submitted unless its current attempt was
        intended and never submitted); one that SUCCEEDED is returned as is; one that ended
        otherwise (an orchestrator's retry) runs again from the next attempt number.

        Args:
            app: The app.
            schedulers: The schedulers to try, in order.
            cfg: Run options; each scheduler gets those it declares.
            workspace: A workspace for roles that have none.
            parent_run_id: Tracking parent run.
            job_key: Stable identity of the logical job (default: a new one).
            chain_key: The chain's identity when it is not the job key.

        Returns:
            The logical handle, and whether the chain was started earlier.
        """
        if not schedulers or not all(isinstance(s, str) and s for s in schedulers):
            raise UnknownRunOptionError(
                f"scheduler: {list(schedulers)!r} is not a list of scheduler names; give "
                "one or more in the order to try, e.g. ['kubernetes', 'local_cwd']"
            )
        for sched in schedulers:  # unknown schedulers and options fail before anything
            self.cfg_for(schedulers, cfg, sched)
        check_candidates_can_run(app, schedulers, self._runner.scheduler_capabilities, workspace)
        key = chain_key or job_key or f"{app.name}-{uuid.uuid4().hex}"
        journal = Journal(key, self._dir)
        self._given[journal.digest] = _Given(app, workspace, parent_run_id)
        handle = self.handle_of(journal, app.name)
        with journal.lock():
            chain = journal.load()
            reattached = chain is not None and bool(chain.attempts)
            if chain is None or not chain.attempts:
                chain = Chain(key, schedulers[0])
            elif chain.done and chain.current.state == AppState.SUCCEEDED.name:
                return RunOutcome(handle, reattached=True)
            elif chain.done:  # a retry of a chain that failed or was cancelled for good
                chain.done = chain.cancelled = reattached = False
                chain.base = len(chain.attempts)
            if not reattached:
                chain.schedulers = list(schedulers)
                chain.app = app_doc(app)
                chain.cfg = dict(cfg or {})
                chain.workspace = (
                    dict(workspace.projects) if workspace is not None
                    and not isinstance(workspace, str) else workspace
                )  # fmt: skip
                chain.parent_run_id = parent_run_id
                self._intend(journal, chain, chain.base)
            self._submit(journal, chain)
        return RunOutcome(handle, reattached=reattached)

    def cfg_for(
        self, schedulers: Sequence[str], cfg: Mapping[str, CfgVal] | None, scheduler: str
    ) -> dict[str, CfgVal]:
        """The run options one candidate gets (see :func:`candidate_cfg`)."""
        return candidate_cfg(self._runner.scheduler_run_opts, schedulers, cfg, scheduler)

    # ---- the steps, each under the chain's lock ------------------------------------------
    def _intend(self, journal: Journal, chain: Chain, n: int) -> None:
        key = f"{chain.chain_key}/attempt-{n}"
        chain.attempts.append(Attempt(n, key, scheduler=chain.candidates[0]))
        chain.not_before = 0.0
        journal.save(chain)  # the intent, before anything is submitted

    def _app(self, journal: Journal, chain: Chain) -> _Given:
        given = self._given.get(journal.digest)
        if given is not None:
            return given
        if chain.app is None:
            raise RuntimeError(f"chain {chain.chain_key!r} has no app recorded")
        ws = chain.workspace
        if isinstance(ws, dict):
            from tether.workspace import Workspace

            return _Given(app_of(chain.app), Workspace(dict(ws)), chain.parent_run_id)
        return _Given(app_of(chain.app), ws, chain.parent_run_id)

    def _submit(self, journal: Journal, chain: Chain) -> str | None:
        """The current attempt's handle: recorded, found by its job key, or submitted now,
        failing over to the next candidate on a capacity refusal. None when the chain was
        cancelled before the attempt was submitted."""
        cur = chain.current
        if cur.handle is not None:
            return cur.handle
        while True:
            sched = cur.scheduler or chain.scheduler
            found = self._runner.find_job(sched, cur.job_key,
                                          self.cfg_for(chain.candidates, chain.cfg, sched))
            if found is not None:  # submitted by a follower killed before recording it
                cur.handle = found.app_handle
                break
            if chain.cancelled:
                cur.state, chain.done = AppState.CANCELLED.name, True
                journal.save(chain)
                return None
            try:
                cur.handle = self._schedule(journal, chain, sched)
                break
            except CapacityError as e:
                self._refused(journal, chain, sched, e)
        if cur.submitted_at is None:  # the placement timeout's clock starts
            cur.submitted_at = self._clock()
        journal.save(chain)
        return cur.handle

    def _schedule(self, journal: Journal, chain: Chain, sched: str) -> str:
        given = self._app(journal, chain)
        cur = chain.current
        app = dataclasses.replace(given.app, attempt=cur.attempt)
        cfg = self.cfg_for(chain.candidates, chain.cfg, sched)
        info = self._runner.dryrun(app, sched, cfg, given.workspace, given.parent_run_id,
                                   cur.job_key)  # fmt: skip
        return self._runner.schedule(info)

    def _refused(self, journal: Journal, chain: Chain, sched: str, error: CapacityError) -> None:
        """Records a capacity refusal and moves the attempt to the next candidate (the
        refusal is raised again when there is none)."""
        cur = chain.current
        cur.refused.append(f"{sched}: {error}")
        candidates = chain.candidates
        rest = candidates[candidates.index(sched) + 1:] if sched in candidates else []
        if not rest:
            cur.state, cur.cause, chain.done = AppState.FAILED.name, "out_of_capacity", True
            journal.save(chain)
            raise error
        log.info("%s refused attempt %d of %s for capacity (%s); trying %s",
                 sched, cur.attempt, chain.chain_key, error, rest[0])  # fmt: skip
        cur.scheduler = rest[0]
        journal.save(chain)  # the intent to submit there, before submitting

    def _policy(self, journal: Journal, chain: Chain) -> RecoveryPolicy | None:
        return self._app(journal, chain).app.recovery

    def _recovers(self, journal: Journal, chain: Chain, status: AppStatus) -> bool:
        policy = self._policy(journal, chain)
        return (
            status.state == AppState.FAILED
            and not chain.cancelled
            and policy is not None
            and policy.recovers(status.cause(), chain.current.attempt - chain.base)
        )

    def _settle(self, journal: Journal, job_key: str, status: AppStatus) -> float | None:
        """Records how an attempt ended; the backoff before the next one, or None when the
        chain is over (or another follower settled it)."""
        with journal.lock():
            chain = journal.load()
            if chain is None or chain.current.job_key != job_key or chain.current.state:
                return None
            cur = chain.current
            policy = self._policy(journal, chain)
            if cur.withdrawing and placement.move_on(chain, status, policy):
                journal.save(chain)  # the intent to submit it to the next candidate
                return None
            failure = status.cause()
            cur.state = status.state.name
            cur.cause = failure.cause.value if failure is not None else None
            if policy is None or not self._recovers(journal, chain, status):
                chain.done = True
                journal.save(chain)
                return None
            delay = policy.delay(cur.attempt - chain.base)
            chain.not_before = self._clock() + delay
            log.info("attempt %d of %s failed (%s); recovering in %.1fs", cur.attempt,
                     chain.chain_key, failure.describe() if failure else "?", delay)
            journal.save(chain)
            return delay

    def _next(self, journal: Journal) -> None:
        """Intends and submits the next attempt (unless done, cancelled, or done already)."""
        with journal.lock():
            chain = journal.load()
            if chain is None or chain.done or chain.current.state is None:
                return
            if chain.cancelled:
                chain.done = True
                journal.save(chain)
                return
            self._intend(journal, chain, chain.current.attempt + 1)
            try:
                self._submit(journal, chain)
            except CapacityError as e:  # recorded: the chain is over, its status says why
                log.warning("no scheduler took attempt %d of %s: %s",
                            chain.current.attempt, chain.chain_key, e)  # fmt: skip

    # ---- what the Runner hands over ------------------------------------------------------
    def find(self, job_key: str) -> ExistingJob | None:
        """The logical job started with ``job_key``, if any (its journal names it).

        Args:
            job_key: The logical job's key.

        Returns:
            Its logical handle and status, or None.
        """
        journal = Journal(job_key, self._dir)
        chain = journal.load()
        if chain is None or not chain.attempts:
            return None
        name = str(chain.app["name"]) if chain.app else "job"
        handle = self.handle_of(journal, name)
        status = self.status(handle)
        return None if status is None else ExistingJob(handle, status)

    def attempts(self, app_handle: AppHandle) -> list[Attempt]:
        """The chain's attempts, oldest first (empty for an unknown chain)."""
        loaded = self._load(app_handle)
        return list(loaded[1].attempts) if loaded else []

    def current(self, app_handle: AppHandle) -> AppHandle | None:
        """The current attempt's handle (None before it is submitted, or for no chain)."""
        loaded = self._load(app_handle)
        if loaded is None:
            return None
        chain = loaded[1]
        cur = chain.current
        if cur.handle is not None:
            return cur.handle
        sched = cur.scheduler or chain.scheduler
        found = self._runner.find_job(sched, cur.job_key,
                                      self.cfg_for(chain.candidates, chain.cfg, sched))
        return found.app_handle if found is not None else None

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """The logical job's status: the current attempt's, PENDING while the next attempt
        is due (see the module docstring). Submits nothing."""
        loaded = self._load(app_handle)
        if loaded is None:
            return None
        journal, chain = loaded
        cur = chain.current
        if cur.withdrawing and not chain.cancelled:
            return placement.withdrawing_status(chain, self._where(chain))
        handle = self.current(app_handle)
        if handle is None:
            state = AppState[cur.state] if cur.state else AppState.PENDING
            what = "; ".join(cur.refused) or "not submitted yet"
            return AppStatus(state, msg=f"{self._where(chain)}: {what}")
        status = self._runner.status(handle)
        return None if status is None else self._logical(journal, chain, status)

    def _where(self, chain: Chain) -> str:
        cur = chain.current
        text = f"attempt {cur.attempt} on {cur.scheduler or chain.scheduler}"
        earlier = [f"attempt {a.attempt} on {a.scheduler or chain.scheduler}: {a.state}"
                   + (f" ({a.cause})" if a.cause else "") for a in chain.attempts[:-1]]  # fmt: skip
        return text + (f" (earlier: {'; '.join(earlier)})" if earlier else "")

    def _logical(self, journal: Journal, chain: Chain, status: AppStatus) -> AppStatus:
        restarts = chain.current.attempt - chain.base
        num_restarts = status.num_restarts + restarts if status.num_restarts >= 0 else -1
        where = self._where(chain)
        if status.is_terminal() and not chain.done and self._recovers(journal, chain, status):
            failure = status.cause()
            why = failure.describe() if failure is not None else "failed"
            return AppStatus(AppState.PENDING, num_restarts,
                             f"{where}: {why}; the next attempt is due", roles=status.roles)
        msg = f"{where}: {status.msg}" if status.msg else where
        return dataclasses.replace(status, num_restarts=num_restarts, msg=msg)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Follows the chain, recovering as its policy says, until it is over (or
        ``timeout`` seconds passed: then the current status).

        Args:
            app_handle: The logical handle.
            wait_interval: Seconds between retries of a reconcile that failed.
            timeout: Give up after this many seconds.

        Returns:
            The final status (the last attempt's), or None for an unknown chain.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            loaded = self._load(app_handle)
            if loaded is None:
                return None
            journal, chain = loaded
            if chain.done:
                return self.status(app_handle)
            if chain.current.state is not None:  # a backoff left by a follower
                if not self._pause(chain.not_before - self._clock(), deadline):
                    return self.status(app_handle)
                self._next(journal)
                continue
            with journal.lock():
                chain = journal.load() or chain
                try:
                    handle = self._submit(journal, chain)
                except CapacityError:  # recorded (a move after a placement timeout): over
                    continue
            if handle is None:
                continue
            left = self._placement(journal)  # the placement timeout, when one applies
            until = deadline if left is None else min(
                deadline if deadline is not None else float("inf"), time.monotonic() + left
            )
            status = self._attempt_final(handle, wait_interval, until)
            if status is None:
                return None
            if not status.is_terminal():
                if left is not None and (deadline is None or time.monotonic() < deadline):
                    continue  # the placement timeout passed: check it
                return self._logical(journal, chain, status)
            delay = self._settle(journal, chain.current.job_key, status)
            if delay is not None:
                if not self._pause(delay, deadline):
                    return self.status(app_handle)
                self._next(journal)

    def placement_check(self, app_handle: AppHandle) -> float | None:
        """Enforces the current attempt's placement timeout (see
        :mod:`tether.runner.placement`): withdraws an attempt still unplaced after it (or
        withdrawing already, by a follower that died), recording the intent first.

        Args:
            app_handle: The logical handle.

        Returns:
            Seconds until the timeout is to be checked again; None when no timeout applies
            (any more).
        """
        journal = self.journal(app_handle)
        return self._placement(journal) if journal is not None else None

    def _placement(self, journal: Journal) -> float | None:
        with journal.lock():
            chain = journal.load()
            if chain is None or not chain.attempts:
                return None
            cur, policy = chain.current, self._policy(journal, chain)
            if cur.withdrawing and cur.handle is not None and not cur.state:
                self._runner.cancel(cur.handle)  # again: its follower may have died first
                return None
            left = placement.seconds_left(chain, policy, self._clock())
            if left is None or left > 0 or policy is None or cur.handle is None:
                return left
            status = self._runner.status(cur.handle)
            if status is None:
                return None
            if not placement.unplaced(status):
                cur.placed = True
                journal.save(chain)
                return None
            placement.withdraw(chain, policy)
            journal.save(chain)  # the intent, before cancelling
            self._runner.cancel(cur.handle)
            return None

    def step(self, app_handle: AppHandle) -> tuple[AppHandle | None, float | None]:
        """What a watch of the chain follows now (see :mod:`tether.runner.chain_watch`),
        submitting the attempt that is due (a watch drives recovery as :meth:`wait` does).

        Args:
            app_handle: The logical handle.

        Returns:
            ``(attempt handle, None)`` to follow; ``(None, seconds)`` while the next attempt
            is due in that many seconds; ``(None, None)`` when the chain is over (or unknown).
        """
        while True:
            loaded = self._load(app_handle)
            if loaded is None or loaded[1].done:
                return None, None
            journal, chain = loaded
            if chain.current.state is not None:  # settled: the next attempt is due
                left = chain.not_before - self._clock()
                if left > 0:
                    return None, left
                self._next(journal)
                continue
            with journal.lock():
                chain = journal.load() or chain
                try:
                    handle = self._submit(journal, chain)
                except CapacityError:  # recorded: the chain is over, its status says why
                    continue
            if handle is not None:
                return handle, None

    def attempt_ended(
        self, app_handle: AppHandle, attempt_handle: AppHandle, status: AppStatus
    ) -> None:
        """Records how a followed attempt ended (a no-op when it is no longer the current
        one, or another follower recorded it): the chain is over, or its next attempt due.

        Args:
            app_handle: The logical handle.
            attempt_handle: The attempt that ended.
            status: Its final status, read from its scheduler.
        """
        loaded = self._load(app_handle)
        if loaded is not None and loaded[1].current.handle == attempt_handle:
            self._settle(loaded[0], loaded[1].current.job_key, status)

    def _attempt_final(
        self, handle: AppHandle, wait_interval: float, deadline: float | None
    ) -> AppStatus | None:
        """The attempt's status once terminal, confirmed by a direct read (a follower's
        cached view may hear that a job ended before it hears why, and the cause decides);
        a non-terminal one when the deadline passed."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            waited = self._runner.wait(handle, wait_interval=wait_interval, timeout=left)
            status = self._runner.status(handle) or waited
            if status is None or status.is_terminal():
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status

    def _pause(self, seconds: float, deadline: float | None) -> bool:
        """Sleeps ``seconds`` (the backoff); False, having slept until the deadline, when
        the deadline comes first."""
        if seconds <= 0:
            return True
        if deadline is not None and time.monotonic() + seconds > deadline:
            self._sleep(max(0.0, deadline - time.monotonic()))
            return False
        self._sleep(seconds)
        return True

    def cancel(self, app_handle: AppHandle) -> None:
        """Stops recovery (recorded first) and cancels the current attempt."""
        loaded = self._load(app_handle)
        if loaded is None:
            return
        journal = loaded[0]
        with journal.lock():
            chain = journal.load()
            if chain is None:
                return
            chain.cancelled = True
            journal.save(chain)
        handle = self.current(app_handle)
        if handle is not None:
            self._runner.cancel(handle)

    def delete(self, app_handle: AppHandle) -> None:
        """Cancels the chain, deletes every attempt and the journal."""
        loaded = self._load(app_handle)
        if loaded is None:
            return
        self.cancel(app_handle)
        for a in loaded[1].attempts:
            for handle in [*a.withdrawn, *([a.handle] if a.handle is not None else [])]:
                self._runner.delete(handle)
        loaded[0].remove()

    def log_lines(
        self, app_handle: AppHandle, lines: Callable[[AppHandle, bool], Iterator[str]],
        should_tail: bool,
    ) -> Iterator[str]:  # fmt: skip
        """Every attempt's lines, each attempt's after a ``[tether] attempt N on BACKEND``
        line; tailing follows the chain into its next attempts while it is not over.

        Args:
            app_handle: The logical handle.
            lines: One attempt's lines (its handle, whether to tail it).
            should_tail: Follow until the chain is over.

        Returns:
            The lines.
        """
        shown = 0
        while True:
            loaded = self._load(app_handle)
            if loaded is None:
                return
            chain = loaded[1]
            for a in chain.attempts[shown:]:
                handle = a.handle
                if handle is None:
                    if not should_tail or a is not chain.current:
                        shown += 1
                        continue
                    break  # not submitted yet: look again
                shown += 1
                yield f"[tether] attempt {a.attempt} on {a.scheduler or chain.scheduler}\n"
                yield from lines(handle, should_tail)
            if not should_tail or (chain.done and shown >= len(chain.attempts)):
                return
            status = self.status(app_handle)
            if status is not None and status.is_terminal():
                # read after the status: a follower may have run more attempts while the
                # last one's lines were tailed (the ``chain`` above is older than that)
                latest = self._load(app_handle)
                if latest is None or shown >= len(latest[1].attempts):
                    return
                continue
            time.sleep(0.2)  # the next attempt is due: look again soon
