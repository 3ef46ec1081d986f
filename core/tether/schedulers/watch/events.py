"""What the watch hub hands out and what it asks of a backend.

A backend follows its jobs through a :class:`Reader` (one per :class:`WatchKey`): a batched
read of every followed job at once (from a watch cache, one ``squeue``, one state-directory
scan) and a direct read of one job (``describe``) that confirms a job the batched read did
not show. :func:`follow_target` of the backend's ``Follow.source`` module names the key of
an app and builds the reader; the hub does the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from tether.errors import BackendError, BackendErrorKind, SpecError
from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.specs import AppState, AppStatus
from tether.specs.status import is_terminal


@dataclass(frozen=True)
class WatchKey:
    """Where a shared view lives: one per backend connection, partition and region.

    Attributes:
        backend: The backend (``kubernetes``, ``local_cwd``...).
        connection: The connection (a kubeconfig and context, a state directory, a cluster).
        partition: The namespace, partition or queue the view covers ("" for all).
        region: The cloud region ("" where there is none).
    """

    backend: str
    connection: str
    partition: str = ""
    region: str = ""

    def __str__(self) -> str:
        parts = [self.backend, self.connection, self.partition, self.region]
        return "/".join(p for p in parts if p)


class Reader(Protocol):
    """A backend's reads of the jobs of one :class:`WatchKey`.

    ``read`` must be cheap in requests (it runs every interval and after every change the
    backend signals); ``confirm`` may cost one direct read per job: the hub calls it only
    for a job ``read`` did not show twice in a row.
    """

    def start(self, wake: Callable[[], None]) -> None:
        """Starts what the reader needs (watch streams); ``wake`` asks for a read now."""

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse] | None:
        """The followed jobs the shared view shows (absent ids: not shown); None: not ready."""

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """A direct read of one job; None only when the backend says it does not exist."""

    def stop(self) -> None:
        """Stops the reader's streams and threads (idempotent)."""


@dataclass(frozen=True)
class FollowTarget:
    """Where a job is followed.

    Attributes:
        key: The shared view's key.
        make_reader: Builds the view's reader (called once per key while it is followed).
        interval: Seconds between reads.
    """

    key: WatchKey
    make_reader: Callable[[], Reader]
    interval: float


S = TypeVar("S", bound=Scheduler[Any])


def view_target(
    scheduler: Scheduler[Any],
    kind: type[S],
    connection: Callable[[S], str],
    make_reader: Callable[[S], Reader],
    partition: str | Callable[[S], str] = "",
    region: str = "",
) -> FollowTarget:
    """A backend's ``follow_target`` in one call: its shared view, at its declared interval.

    Args:
        scheduler: The scheduler the hub was handed.
        kind: The backend's scheduler class.
        connection: The view's connection (see :class:`WatchKey`), from the scheduler.
        make_reader: Builds the view's reader from the scheduler (called in the view's
            thread, once per key while it is followed).
        partition: The namespace, partition or queue (or how to find it from the scheduler).
        region: The region.

    Returns:
        The target; its interval is the backend's ``Capabilities.follow.interval``.

    Raises:
        TypeError: When ``scheduler`` is not a ``kind``.
    """
    if not isinstance(scheduler, kind):
        raise TypeError(f"not a {kind.__name__}: {type(scheduler).__name__}")
    where = partition(scheduler) if callable(partition) else partition
    key = WatchKey(scheduler.backend, connection(scheduler), where, region)
    interval = scheduler.capabilities.follow.interval
    return FollowTarget(key, lambda: make_reader(scheduler), interval)


@dataclass(frozen=True)
class FailurePolicy:
    """When a view's failing reads stop being a blip and become an error its followers hear.

    Reads that fail are retried with backoff, silently to subscribers; once they have failed
    ``failures`` times in a row over at least ``seconds`` seconds, every job of the view gets
    a non-final event carrying a :class:`ViewError` (and again whenever the error's text
    changes), until a read succeeds. Both bounds must be passed: a few quick failures (a
    dropped connection) or one slow one (a long timeout) stay silent.

    Attributes:
        failures: Failed reads in a row (at least 1).
        seconds: Seconds since the first of them.
    """

    failures: int = 5
    seconds: float = 120.0

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int) \
                or self.failures < 1:  # fmt: skip
            raise SpecError(f"FailurePolicy.failures must be an int >= 1, not {self.failures!r}")
        if not isinstance(self.seconds, (int, float)) or not self.seconds >= 0:
            raise SpecError(f"FailurePolicy.seconds must be a number >= 0, not {self.seconds!r}")


@dataclass(frozen=True)
class ViewError:
    """A view whose reads have failed past its :class:`FailurePolicy`.

    Attributes:
        key: The view.
        error: The last failure, as the backend put it.
        failures: Failed reads in a row.
        seconds: Seconds since the first of them.
    """

    key: WatchKey
    error: str
    failures: int = field(compare=False)
    seconds: float = field(compare=False)

    def describe(self) -> str:
        """A sentence naming the backend, the view and the last error."""
        return (
            f"reading {self.key.backend} jobs ({self.key}) has failed {self.failures} times "
            f"in a row for {self.seconds:.0f} s; last error: {self.error}"
        )


class WatchReadError(BackendError):
    """A followed job cannot be read: its backend view's reads keep failing.

    Raised by followers (``Runner.wait``/``watch``) that hear a :class:`ViewError`; the
    message names the job, the backend and its last error. Nothing is known of the job's
    state: it may still run (follow it again, or read it, once the backend is back).

    Args:
        message: The message.
        backend: The backend.
    """

    kind: BackendErrorKind = "connection"

    def __init__(self, message: str, backend: str) -> None:
        super().__init__(message, backend=backend)


GONE_MSG = "the app no longer exists on {backend} (deleted outside tether?)"


@dataclass(frozen=True)
class JobEvent:
    """A change of a followed job, as one subscriber receives it.

    Attributes:
        ref: What the subscriber named the job by (its handle, or the app id).
        key: The shared view it belongs to.
        app_id: The app id.
        state: Its state (UNKNOWN for a job that no longer exists).
        msg: The backend's message, or why the job is gone.
        response: The backend's description (None when the job is gone).
        gone: The backend confirmed, by a direct read, that the job does not exist.
        previous: The state the subscriber last heard (None for the first event).
        error: Set while the view's reads keep failing (see :class:`FailurePolicy`); the
            state, message and response are then the last ones read (UNKNOWN and None for
            a job never read). A later event without it says the reads recovered.
    """

    ref: Hashable
    key: WatchKey
    app_id: str
    state: AppState
    msg: str = ""
    response: DescribeAppResponse | None = field(default=None, repr=False, compare=False)
    gone: bool = False
    previous: AppState | None = None
    error: ViewError | None = None

    @property
    def final(self) -> bool:
        """The job ended (a terminal state) or is gone: nothing more will be heard of it."""
        return self.gone or is_terminal(self.state)

    def status(self) -> AppStatus | None:
        """The event as an :class:`~tether.specs.AppStatus` (None when the job is gone)."""
        resp = self.response
        if resp is None:
            return None
        return AppStatus(
            state=resp.state,
            num_restarts=resp.num_restarts,
            msg=resp.msg if resp.msg != "<NONE>" else "",
            structured_error_msg=resp.structured_error_msg,
            ui_url=resp.ui_url,
            roles=resp.roles_statuses,
            failure=resp.failure,
        )
