"""Why a replica or an app failed: :class:`FailureCause` and :class:`Failure`.

Each backend classifies its native failure reasons in its ``status.py`` (one table per
backend) into a :class:`FailureCause`, keeping the native reason next to it. The causes split
in two: *infrastructure* causes (the machine went away under a healthy program: preempted,
node lost, evicted, host terminated, no capacity) and *application* causes (the program
itself failed: a non-zero exit code, killed for using too much memory). A recovery policy
(:mod:`tether.specs.recovery`) reacts to the former only, unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


class FailureCause(str, Enum):
    """A backend-independent reason why a replica (or an app) failed.

    * ``PREEMPTED``: the backend took the resources back for other work (Slurm
      ``PREEMPTED``, a Kubernetes scheduler preemption, a reclaimed spot instance).
    * ``NODE_LOST``: the node the replica ran on failed or disappeared (Slurm ``NODE_FAIL``,
      a deleted or unreachable Kubernetes node, a dead Ray node).
    * ``EVICTED``: the node's agent or an administrator evicted the replica (Kubernetes
      eviction API, node pressure, a drain).
    * ``HOST_TERMINATED``: the cloud terminated the host VM (AWS Batch ``Host EC2 ...
      terminated``, a SageMaker spot interruption).
    * ``OUT_OF_CAPACITY``: the backend could not place the job (unschedulable, no capacity,
      a node that failed to boot).
    * ``APPLICATION``: the program exited with a non-zero code.
    * ``OOM_KILLED``: the program was killed for exceeding its memory.
    * ``UNKNOWN``: the backend says the job failed but not why.
    """

    PREEMPTED = "preempted"
    NODE_LOST = "node_lost"
    EVICTED = "evicted"
    HOST_TERMINATED = "host_terminated"
    OUT_OF_CAPACITY = "out_of_capacity"
    APPLICATION = "application"
    OOM_KILLED = "oom_killed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def is_infrastructure(self) -> bool:
        """Whether the cause is the infrastructure's, not the program's."""
        return self in INFRASTRUCTURE_CAUSES


INFRASTRUCTURE_CAUSES = frozenset(
    {
        FailureCause.PREEMPTED,
        FailureCause.NODE_LOST,
        FailureCause.EVICTED,
        FailureCause.HOST_TERMINATED,
        FailureCause.OUT_OF_CAPACITY,
    }
)
"""The causes that are not the program's fault: what recovery reacts to by default."""


@dataclass(frozen=True)
class Failure:
    """A classified failure: the cause, the backend's own words, and the exit code.

    Attributes:
        cause: The backend-independent cause.
        reason: The native reason as the backend gave it (``NODE_FAIL``,
            ``DisruptionTarget: EvictionByEvictionAPI``, ``Host EC2 (instance i-..)
            terminated.``).
        exit_code: The program's exit code, when there is one.
    """

    cause: FailureCause
    reason: str = ""
    exit_code: int | None = None

    @property
    def is_infrastructure(self) -> bool:
        """Whether the cause is the infrastructure's (see :data:`INFRASTRUCTURE_CAUSES`)."""
        return self.cause.is_infrastructure

    def describe(self) -> str:
        """``preempted (PREEMPTED)`` or ``application, exit code 3 (NonZeroExitCode)``."""
        text = str(self.cause)
        if self.exit_code is not None and self.cause in (
            FailureCause.APPLICATION,
            FailureCause.OOM_KILLED,
        ):
            text += f", exit code {self.exit_code}"
        return f"{text} ({self.reason})" if self.reason else text

    def to_dict(self) -> dict[str, object]:
        """A JSON-serializable form: ``cause`` (its value), ``reason``, ``exit_code``."""
        return {"cause": self.cause.value, "reason": self.reason, "exit_code": self.exit_code}


def application_failure(exit_code: int | None, reason: str = "") -> Failure:
    """The failure of a program that exited with ``exit_code`` (UNKNOWN when None).

    Args:
        exit_code: The exit code.
        reason: The native reason.

    Returns:
        The failure.
    """
    cause = FailureCause.UNKNOWN if exit_code is None else FailureCause.APPLICATION
    return Failure(cause, reason, exit_code)


def app_failure(failures: Iterable[Failure | None]) -> Failure | None:
    """The failure of an app from its replicas': an infrastructure cause wins.

    When a node is lost, the replicas on other nodes usually fail too (their peers are gone),
    with application exit codes; the app failed because of the node, so the first
    infrastructure failure is the app's. Otherwise the first known failure, else None.

    Args:
        failures: The replicas' failures (None for a replica that did not fail).

    Returns:
        The app's failure, or None when no replica failed.
    """
    known = [f for f in failures if f is not None]
    for f in known:
        if f.is_infrastructure:
            return f
    for f in known:
        if f.cause != FailureCause.UNKNOWN:
            return f
    return known[0] if known else None
