"""The log cursor: how many lines of each replica a follower has delivered, and where it lives.

A follower that stops while its job runs (a triggerer restart, a retried task, a killed
worker) and a later one that re-attaches must neither repeat nor drop log lines. The
:class:`LogCursor` counts the lines delivered per replica (``role/replica``, the prefix of
every formatted line); :meth:`LogCursor.unseen` reads a job's lines past it. Where it is kept
between followers is the caller's choice, passed in as a :class:`CursorStore`: Airflow keeps
it in an XCom of the task instance, a script in a file (:class:`FileCursorStore`), and a
follower with nothing to resume keeps none; Prefect keeps none either, and counts the job's
lines its API holds instead (:func:`tether.adapters.prefect.logship.shipped_cursor`).

Only the counting lives here; moving the cursor is the job of whoever delivers a line (a
line read but not yet shown must not count).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tether.runner import Runner, fan_in


class CursorStore(Protocol):
    """Where a log cursor is kept between followers of one job."""

    def load(self) -> Mapping[str, Any] | None:
        """The saved cursor (``role/replica`` to a line count), or None."""
        ...

    def save(self, seen: Mapping[str, int]) -> bool:
        """Saves the cursor; False when that failed (the caller tries again later)."""
        ...


@dataclass
class LogCursor:
    """How many lines of each replica (``role/replica``) were delivered.

    Attributes:
        seen: Lines delivered, by replica.
    """

    seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any) -> LogCursor:
        """Reads a saved cursor (an empty one for anything else).

        Args:
            value: A mapping of ``role/replica`` to a line count, or None.

        Returns:
            The cursor.
        """
        if not isinstance(value, Mapping):
            return cls()
        out: dict[str, int] = {}
        for k, v in value.items():
            try:
                out[str(k)] = max(int(v), 0)
            except (TypeError, ValueError):
                continue
        return cls(out)

    @classmethod
    def load(cls, store: CursorStore | None) -> LogCursor:
        """The cursor a store keeps (an empty one without a store).

        Args:
            store: The store.

        Returns:
            The cursor.
        """
        return cls() if store is None else cls.from_json(store.load())

    def to_json(self) -> dict[str, int]:
        """The JSON form."""
        return dict(self.seen)

    def copy(self) -> LogCursor:
        """An independent copy."""
        return LogCursor(dict(self.seen))

    def advance(self, replica: str, count: int = 0) -> None:
        """Moves the cursor past a delivered line.

        Args:
            replica: ``role/replica``.
            count: The line's number in that replica's log (0: the next one).
        """
        self.seen[replica] = count or self.seen.get(replica, 0) + 1

    def unseen(
        self, runner: Runner, app_handle: str, follow: bool
    ) -> Iterator[tuple[str, int, str]]:
        """The job's lines past this cursor, which it does not move.

        Args:
            runner: The runner.
            app_handle: The job.
            follow: Follow the logs until the job ends (False: what is there now).

        Yields:
            ``(role/replica, the line's number in that replica's log, the formatted line)``.
        """
        counts: dict[str, int] = {}
        for line in fan_in(runner, app_handle, should_tail=follow):
            replica = f"{line.role}/{line.replica}"
            counts[replica] = counts.get(replica, 0) + 1
            if counts[replica] > self.seen.get(replica, 0):
                yield replica, counts[replica], line.format()

    def new_lines(self, runner: Runner, app_handle: str, follow: bool) -> Iterator[str]:
        """The job's lines past this cursor, moving it past each as it is yielded.

        Args:
            runner: The runner.
            app_handle: The job.
            follow: Follow the logs until the job ends (False: what is there now).

        Yields:
            Each new formatted line.
        """
        for replica, count, text in self.unseen(runner, app_handle, follow):
            self.seen[replica] = count
            yield text


class FileCursorStore:
    """Keeps a cursor in a JSON file (0600, replaced atomically).

    Args:
        path: The file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> Mapping[str, Any] | None:
        """The saved cursor, or None when there is no readable file."""
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, Mapping) else None

    def save(self, seen: Mapping[str, int]) -> bool:
        """Writes the cursor (a crash leaves the old file or the new one, never half).

        Args:
            seen: The counts.

        Returns:
            Whether it was written.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(seen), f)
            os.replace(tmp, self.path)
        except OSError:
            return False
        return True
