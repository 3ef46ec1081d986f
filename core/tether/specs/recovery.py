"""Recovering a job from infrastructure failures: :class:`RecoveryPolicy` and checkpoints.

An :class:`~tether.specs.AppDef` may carry a ``recovery`` policy (on which
:class:`~tether.specs.FailureCause` to submit the app again, how many times, with what
backoff) and a ``checkpoint`` location (a path or an fsspec URL every replica sees), passed
to every replica with the attempt number (see :mod:`tether.schedulers.replica`). Both are
checked here, with messages naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether.specs.checks import Problem, got, is_int, raise_problems, short_repr
from tether.specs.failures import INFRASTRUCTURE_CAUSES, Failure, FailureCause

DEFAULT_CAUSES: tuple[FailureCause, ...] = tuple(
    c for c in FailureCause if c in INFRASTRUCTURE_CAUSES
)
"""The causes a policy recovers from unless told otherwise: the infrastructure's."""

CHECKPOINT_SCHEMES = frozenset(
    {
        "file", "local", "memory", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl",
        "hdfs", "webhdfs", "oss", "r2", "hf", "ftp", "sftp", "ssh", "smb", "http", "https",
        "dbfs", "oci", "lakefs", "wandb", "mlflow",
    }
)  # fmt: skip
"""URL schemes a checkpoint location may have (fsspec's common filesystems); a plain path
has none."""


@dataclass(frozen=True)
class RecoveryPolicy:
    """When and how often tether submits a failed app again.

    Attributes:
        max_recoveries: How many times the app may be submitted again after a failure whose
            cause is in ``on`` (0: never); the first submission does not count.
        on: The causes to recover from (:class:`~tether.specs.FailureCause` or its value,
            e.g. ``"preempted"``); by default every infrastructure cause. An application
            failure is recovered only when ``"application"`` is listed.
        backoff_s: Seconds to wait before the first recovery.
        backoff_factor: Each later wait is the previous one times this (>= 1).
        max_backoff_s: The longest wait.
        placement_timeout_s: Seconds an attempt may stay unplaced (pending, not yet given
            its nodes) on a candidate of a failover list before tether cancels it there and,
            once it is confirmed gone, submits it to the next candidate (None: wait as long
            as the backend keeps it queued). The last candidate is never timed out.
    """

    max_recoveries: int = 3
    on: tuple[FailureCause, ...] = field(default=DEFAULT_CAUSES)
    backoff_s: float = 10.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 600.0
    placement_timeout_s: float | None = None

    def __post_init__(self) -> None:
        on = self.on
        if isinstance(on, (str, FailureCause)):
            on = (on,)
        if isinstance(on, Iterable) and not isinstance(on, (str, bytes)):
            causes, problems = parse_causes(list(on))
            raise_problems(problems, "RecoveryPolicy")
            object.__setattr__(self, "on", causes)
        raise_problems(check_policy(self), "RecoveryPolicy")

    def recovers(self, failure: Failure | None, recoveries_done: int) -> bool:
        """Whether a failure should be recovered from.

        Args:
            failure: Why the last attempt failed (None: unknown).
            recoveries_done: How many recoveries happened already.

        Returns:
            True when the cause is in ``on`` and recoveries are left.
        """
        if failure is None or recoveries_done >= self.max_recoveries:
            return False
        return failure.cause in self.on

    def delay(self, recoveries_done: int) -> float:
        """Seconds to wait before the next recovery (exponential, capped).

        Args:
            recoveries_done: How many recoveries happened already (0 before the first).

        Returns:
            The wait.
        """
        wait = self.backoff_s * self.backoff_factor ** max(0, recoveries_done)
        return float(min(wait, self.max_backoff_s))


def parse_causes(values: list[Any]) -> tuple[tuple[FailureCause, ...], list[Problem]]:
    """Causes from their values (or members), with a close match for a misspelt one.

    Args:
        values: The causes as given.

    Returns:
        The causes (duplicates dropped, order kept) and the problems found.
    """
    allowed = [c.value for c in FailureCause]
    out: list[FailureCause] = []
    problems: list[Problem] = []
    for i, v in enumerate(values):
        if isinstance(v, FailureCause):
            cause = v
        elif isinstance(v, str) and v.strip().lower() in allowed:
            cause = FailureCause(v.strip().lower())
        elif isinstance(v, str):
            import difflib  # for an error's hint only

            close = difflib.get_close_matches(v.strip().lower(), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(
                Problem(f"recovery.on[{i}] = {short_repr(v)} is not one of {allowed}{hint}")
            )
            continue
        else:
            msg = f"recovery.on[{i}] must be a FailureCause or one of {allowed}, got {got(v)}"
            problems.append(Problem(msg, True))
            continue
        if cause not in out:
            out.append(cause)
    return tuple(out), problems


def _check_float(name: str, value: Any, low: float) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [Problem(f"recovery.{name} must be a number >= {low:g}, got {got(value)}", True)]
    if not math.isfinite(value) or value < low:
        return [Problem(f"recovery.{name} = {value!r} is not allowed: must be a finite "
                        f"number >= {low:g}")]  # fmt: skip
    return []


def check_policy(policy: Any) -> list[Problem]:
    """Checks a :class:`RecoveryPolicy` (or None: no recovery).

    Args:
        policy: The value of ``AppDef.recovery``.

    Returns:
        The problems found, each naming the field.
    """
    if policy is None:
        return []
    if not isinstance(policy, RecoveryPolicy):
        return [Problem(f"recovery must be a RecoveryPolicy or None, got {got(policy)}", True)]
    out: list[Problem] = []
    n = policy.max_recoveries
    if not is_int(n):
        out.append(Problem(f"recovery.max_recoveries must be an int >= 0, got {got(n)}", True))
    elif n < 0:
        out.append(Problem(f"recovery.max_recoveries = {n} is negative: must be an int >= 0"))
    if not isinstance(policy.on, tuple) or not all(isinstance(c, FailureCause) for c in policy.on):
        out.append(Problem(f"recovery.on must be a list of causes, got {got(policy.on)}", True))
    elif not policy.on:
        out.append(Problem("recovery.on is empty: name at least one cause to recover from"))
    out += _check_float("backoff_s", policy.backoff_s, 0.0)
    out += _check_float("backoff_factor", policy.backoff_factor, 1.0)
    out += _check_float("max_backoff_s", policy.max_backoff_s, 0.0)
    out += _check_timeout(policy.placement_timeout_s)
    return out


def _check_timeout(value: Any) -> list[Problem]:
    """Checks ``placement_timeout_s``: None, or a finite number of seconds > 0."""
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [Problem(f"recovery.placement_timeout_s must be a number of seconds > 0 or "
                        f"None, got {got(value)}", True)]  # fmt: skip
    if not math.isfinite(value) or value <= 0:
        return [Problem(f"recovery.placement_timeout_s = {value!r} is not allowed: must be a "
                        "finite number of seconds > 0, or None to wait as long as the backend "
                        "keeps the job queued")]  # fmt: skip
    return []


def checkpoint_scheme(location: str) -> str:
    """The URL scheme of a checkpoint location ("" for a plain path).

    Args:
        location: The location.

    Returns:
        The lower-case scheme.
    """
    head, sep, _ = location.partition("://")
    return head.lower() if sep and head and "/" not in head else ""


def check_checkpoint(location: Any) -> list[Problem]:
    """Checks ``AppDef.checkpoint``: None, an absolute or relative path, or a URL of a known
    scheme (:data:`CHECKPOINT_SCHEMES`).

    Args:
        location: The value.

    Returns:
        The problems found.
    """
    if location is None:
        return []
    if not isinstance(location, str):
        return [Problem(f"checkpoint must be a str (a path or an fsspec URL) or None, got "
                        f"{got(location)}", True)]  # fmt: skip
    if not location.strip() or "\0" in location:
        return [Problem(f"checkpoint = {short_repr(location)} is not a path or URL")]
    scheme = checkpoint_scheme(location)
    if not scheme and "://" in location:
        return [Problem(f"checkpoint = {short_repr(location)} has an empty URL scheme")]
    if scheme and scheme not in CHECKPOINT_SCHEMES:
        import difflib  # for an error's hint only

        close = difflib.get_close_matches(scheme, sorted(CHECKPOINT_SCHEMES), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return [
            Problem(
                f"checkpoint = {short_repr(location)} has the unknown URL scheme {scheme!r}"
                f"{hint} (known: {', '.join(sorted(CHECKPOINT_SCHEMES))}; or give a path)"
            )
        ]
    return []


def check_attempt(attempt: Any) -> list[Problem]:
    """Checks ``AppDef.attempt``: an int >= 0."""
    if not is_int(attempt):
        return [Problem(f"attempt must be an int >= 0, got {got(attempt)}", True)]
    if attempt < 0:
        return [Problem(f"attempt = {attempt} is negative: must be an int >= 0")]
    return []
