"""The re-attach rule: whether a new attempt follows the job an earlier one launched.

Every caller that gives a job a stable identity (a job key) asks this one rule whether to
**attach** to the job an earlier attempt launched with that identity or to **launch** a new
one: :meth:`tether.runner.Runner.run_or_attach` (the CLI, scripts), and through it the
adapters' job session (Airflow, Prefect, KFP). The rule, for ``mode=AUTO``:

=========================================  ==========  ===========================================
earlier job                                 action      why
=========================================  ==========  ===========================================
none, or the scheduler does not know it     launch      nothing to follow
not final (PENDING, RUNNING... UNKNOWN)     attach      never two jobs for one identity
SUCCEEDED, outcome not recorded             attach      its result is adopted (the follower died)
SUCCEEDED, outcome recorded                 launch      a user asked to run it again
FAILED or CANCELLED                         launch      a retry
=========================================  ==========  ===========================================

The SUCCEEDED case is deliberate: an attempt that dies after its job succeeded and before it
recorded the outcome (a worker killed at that instant) must not run the job twice, so its
next attempt adopts the result. Only a caller that keeps a record of outcomes (Airflow's
ledger) can say an outcome was recorded; the others pass ``recorded=False`` and always adopt
a SUCCEEDED job. A job in UNKNOWN state (the scheduler cannot tell) counts as not final:
attaching to it never starts a duplicate of a job that may still run.

``mode=ALWAYS`` also adopts a recorded SUCCEEDED job; ``mode=NEVER`` always launches, and
asks to cancel an earlier job that is not final.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tether.errors import SpecError
from tether.specs import AppHandle, AppState, AppStatus


@dataclass
class ExistingJob:
    """A job found by its job identity.

    Attributes:
        app_handle: Its handle.
        status: Its current status.
    """

    app_handle: AppHandle
    status: AppStatus


@dataclass
class RunOutcome:
    """What :meth:`Runner.run_or_attach` did.

    Attributes:
        app_handle: The job's handle.
        reattached: True when the job was launched earlier (same job key), not now.
    """

    app_handle: AppHandle
    reattached: bool


class Reattach(enum.Enum):
    """How a caller applies the rule (see the module docs)."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"

    @classmethod
    def parse(cls, value: object, what: str = "reattach") -> Reattach:
        """A mode from its name (or the mode itself).

        Args:
            value: ``"auto"``, ``"always"``, ``"never"`` or a :class:`Reattach`.
            what: The argument's name, for the error.

        Returns:
            The mode.

        Raises:
            SpecError: For any other value (naming the allowed ones and a close match).
        """
        if isinstance(value, cls):
            return value
        names = [m.value for m in cls]
        if isinstance(value, str) and value in names:
            return cls(value)
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(str(value), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(
            f"{what}={value!r} is not allowed; use one of {', '.join(map(repr, names))}{hint}"
        )


class Action(enum.Enum):
    """What an attempt does."""

    LAUNCH = "launch"
    ATTACH = "attach"


@dataclass(frozen=True)
class Decision:
    """The outcome of :func:`decide`.

    Attributes:
        action: Launch a new job or attach to the earlier one.
        reason: Why (for the caller's log).
        cancel_previous: A job of an earlier attempt to cancel first (``mode=NEVER``).
    """

    action: Action
    reason: str
    cancel_previous: str | None = None


@dataclass(frozen=True)
class EarlierJob:
    """The job an earlier attempt launched with the same identity.

    Attributes:
        app_handle: Its handle (None: it was never seen, e.g. the submission died).
        status: Its status (None: the scheduler does not know it).
        recorded: Whether an attempt recorded its outcome (the orchestrator's task finished
            with it). False where the caller keeps no such record.
        who: How the log names it (``the job launched by try 1``).
        recorded_by: How the log names who recorded its outcome (``try 2``).
    """

    app_handle: str | None
    status: AppStatus | None
    recorded: bool = False
    who: str = "the earlier job"
    recorded_by: str = "an earlier attempt"


def decide(earlier: EarlierJob | None, mode: Reattach = Reattach.AUTO) -> Decision:
    """Applies the re-attach rule (see the module docs).

    Args:
        earlier: The earlier job (None: no earlier attempt launched one).
        mode: How to apply it.

    Returns:
        The decision.
    """
    if earlier is None:
        return Decision(Action.LAUNCH, "no earlier attempt launched a job")
    who, status = earlier.who, earlier.status
    if status is None or earlier.app_handle is None:
        return Decision(Action.LAUNCH, f"{who} is unknown to the scheduler")
    state = status.state
    if mode is Reattach.NEVER:
        running = not status.is_terminal()
        return Decision(Action.LAUNCH, "reattach='never'",
                        cancel_previous=earlier.app_handle if running else None)
    if not status.is_terminal():
        return Decision(Action.ATTACH, f"{who} is still {state.name}")
    if state != AppState.SUCCEEDED:
        return Decision(Action.LAUNCH, f"{who} finished {state.name}")
    if not earlier.recorded:
        return Decision(Action.ATTACH, f"{who} SUCCEEDED and its outcome was never recorded")
    if mode is Reattach.ALWAYS:
        return Decision(Action.ATTACH, f"{who} SUCCEEDED (reattach='always')")
    return Decision(Action.LAUNCH,
                    f"{who} SUCCEEDED and {earlier.recorded_by} recorded it: it runs anew")
