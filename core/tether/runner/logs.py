"""Log fan-in: every replica of every role, merged into one live stream of lines.

The CLI's ``run --log``/``log``, the Airflow task log, the Prefect run logger and the KFP
launcher step all read job logs through :func:`fan_in`, so they look the same everywhere:
``role/replica line``. Values of secret-looking environment variables of the app are redacted.

A consumer that stops reading (breaks out of, or closes, the iterator) ends every replica's
reader thread promptly, also one waiting for a line that may never come (a Pending pod, a
quiet process): the readers read inside :func:`~tether.schedulers.interrupt.stoppable`, so
the backends' waits end at the stop request and their streams release what they hold. An
app of one replica has nothing to merge: its lines are read in the consumer's own thread.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError
from tether.schedulers.interrupt import Stopped, StopToken, stoppable
from tether.specs.secrets import app_secret_values, mask_text

if TYPE_CHECKING:
    from datetime import datetime

    from tether.runner.api import Runner
    from tether.schedulers.api import Stream
    from tether.specs import AppHandle


@dataclass(frozen=True)
class LogLine:
    """One line of one replica.

    Attributes:
        role: The role's name.
        replica: The replica index.
        line: The text, ending with ``\\n``.
    """

    role: str
    replica: int
    line: str

    def format(self) -> str:
        """``role/replica line`` (without the trailing newline)."""
        return f"{self.role}/{self.replica} {self.line.rstrip(chr(10))}"


_DONE = object()

QUEUE_BYTES = 16 * 1024 * 1024
"""How many bytes of lines :func:`fan_in` holds between the readers and the consumer.

A reader waits while the queue is full, so memory stays bounded whatever the line lengths
(a log without newlines comes in pieces of up to 8 MiB) and however slow the consumer."""


class _ByteQueue:
    """A FIFO bounded by the size of what it holds, not the number of items.

    One item is always admitted into an empty queue, so an item larger than the bound
    passes (alone) instead of blocking forever.

    Args:
        limit: The bound in bytes (characters of the lines).
        stop: Set when the consumer is gone: waiting writers give up.
    """

    def __init__(self, limit: int, stop: StopToken) -> None:
        self._limit = limit
        self._stop = stop
        self._items: collections.deque[tuple[object, int]] = collections.deque()
        self._size = 0
        self._cond = threading.Condition()

    def put(self, item: object, size: int = 0) -> bool:
        """Adds an item, waiting while the queue is full.

        Args:
            item: The item.
            size: What it weighs (0 for markers).

        Returns:
            False when the consumer stopped (the item was dropped).
        """
        with self._cond:
            while self._items and self._size + size > self._limit:
                if self._stop.is_set():
                    return False
                self._cond.wait(0.5)
            self._items.append((item, size))
            self._size += size
            self._cond.notify_all()
            return True

    def get(self) -> object:
        """Takes the oldest item, waiting for one."""
        with self._cond:
            while not self._items:
                self._cond.wait()
            item, size = self._items.popleft()
            self._size -= size
            self._cond.notify_all()
            return item

    def close(self) -> None:
        """Wakes the writers waiting for room, so they see the stop and end."""
        with self._cond:
            self._cond.notify_all()


class LogReadError(TetherError, RuntimeError):
    """A replica's log could not be read (see ``fan_in(raise_errors=True)``)."""


def _replicas(runner: Runner, app_handle: AppHandle) -> tuple[list[tuple[str, int]], list[str]]:
    app = runner.describe(app_handle)
    pairs: list[tuple[str, int]] = []
    secrets: list[str] = []
    if app is not None:
        secrets = app_secret_values(app.roles)
        for role in app.roles:
            pairs.extend((role.name, k) for k in range(role.num_replicas))
    if not pairs:
        status = runner.status(app_handle)
        for rs in status.roles if status else []:
            pairs.extend((rs.role, rep.id) for rep in rs.replicas)
    return pairs, secrets


def _forward(
    lines: Iterator[str], role: str, k: int, secrets: list[str], q: _ByteQueue, stop: StopToken
) -> None:
    """Masks one replica's lines into the queue until they end or the consumer is gone."""
    try:
        for line in lines:
            if stop.is_set():
                break
            masked = mask_text(line, secrets)
            del line  # hold one copy of a long line, not two, while the queue is full
            if not q.put(LogLine(role, k, masked), len(masked)):
                break
    finally:  # a stream left early releases what it holds now, not when collected
        close = getattr(lines, "close", None)
        if close is not None:
            close()


def _one(
    runner: Runner,
    app_handle: AppHandle,
    role: str,
    k: int,
    secrets: list[str],
    raise_errors: bool,
    kwargs: Mapping[str, Any],
) -> Iterator[LogLine]:
    """:func:`fan_in` of a single replica: its lines, masked, read by the consumer itself (no
    reader thread, no queue); a read error ends it as it ends a replica's reader there."""
    lines: Iterator[str] | None = None
    try:
        while True:
            try:
                if lines is None:
                    lines = iter(runner.log_lines(app_handle, role, k, **kwargs))
                line = next(lines)
            except StopIteration:
                return
            except Stopped:
                return  # a stop requested of the consumer's own reads
            except Exception as e:
                if raise_errors:
                    raise LogReadError(f"cannot read the logs of {role}/{k}: {e}") from e
                yield LogLine(role, k, f"[tether] cannot read logs of {role}/{k}: {e}\n")
                return
            yield LogLine(role, k, mask_text(line, secrets))
    finally:  # a stream left early releases what it holds now, not when collected
        close = getattr(lines, "close", None)
        if close is not None:
            close()


def fan_in(
    runner: Runner,
    app_handle: AppHandle,
    roles: Mapping[str, Sequence[int]] | None = None,
    should_tail: bool = True,
    streams: Stream | None = None,
    regex: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    raise_errors: bool = False,
) -> Iterator[LogLine]:
    """Merges the log streams of the app's replicas as lines arrive.

    Lines of one replica keep their order; lines of different replicas interleave in arrival
    order. With ``should_tail`` the iterator ends when every replica has finished.

    Args:
        runner: The runner.
        app_handle: The app.
        roles: Only these roles (and replica indices); all when None.
        should_tail: Follow the logs while the app runs.
        streams: stdout, stderr or combined (default combined).
        regex: Only lines matching this expression.
        since: Only lines at or after this time.
        until: Only lines before this time.
        raise_errors: When a replica's log cannot be read, raise :class:`LogReadError` after
            the other replicas' lines (default: a ``[tether] cannot read logs`` line instead).

    Yields:
        One :class:`LogLine` per line.

    Raises:
        LogReadError: With ``raise_errors``, naming the first replica that could not be read.
    """
    pairs, secrets = _replicas(runner, app_handle)
    if roles is not None:
        pairs = [(r, k) for r, k in pairs if r in roles and (not roles[r] or k in roles[r])]
    kwargs: dict[str, Any] = {"regex": regex, "since": since, "until": until,
                              "should_tail": should_tail, "streams": streams}  # fmt: skip
    if len(pairs) == 1:  # nothing to merge: read in the consumer's thread
        yield from _one(runner, app_handle, *pairs[0], secrets, raise_errors, kwargs)
        return
    stop = StopToken()  # set when the consumer is gone: every reader's wait ends at once
    q = _ByteQueue(QUEUE_BYTES, stop)
    errors: list[str] = []

    def read(role: str, k: int) -> None:
        _forward(iter(runner.log_lines(app_handle, role, k, **kwargs)), role, k, secrets, q, stop)

    def pump(role: str, k: int) -> None:
        try:
            with stoppable(stop):
                read(role, k)
        except Stopped:
            pass  # the consumer is gone
        except Exception as e:
            if raise_errors:
                errors.append(f"{role}/{k}: {e}")
            else:
                q.put(LogLine(role, k, f"[tether] cannot read logs of {role}/{k}: {e}\n"))
        finally:
            q.put(_DONE)

    threads = [
        threading.Thread(target=pump, args=p, daemon=True, name=f"logs-{p[0]}-{p[1]}")
        for p in pairs
    ]
    for t in threads:
        t.start()
    remaining = len(threads)
    try:
        while remaining:
            item = q.get()
            if item is _DONE:
                remaining -= 1
            else:
                assert isinstance(item, LogLine)
                yield item
    finally:
        stop.set()
        q.close()
    if errors:
        raise LogReadError(f"cannot read the logs of {errors[0]}")
