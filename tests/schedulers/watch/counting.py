"""A watch hub whose readers are counted: how many shared views were built, what each read.

Tests of followers (the Airflow trigger, the Prefect task) install it as the process's hub
to show that many followers share one view, by counts rather than times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.watch import FollowTarget, Reader, WatchHub, resolve_target
from tether.schedulers.watch import hub as hub_module


class _CountedReader:
    """A backend's reader, each ``read`` recorded."""

    def __init__(self, inner: Reader, reads: list[frozenset[str]]) -> None:
        self._inner = inner
        self._reads = reads

    def start(self, wake: Callable[[], None]) -> None:
        self._inner.start(wake)

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse] | None:
        self._reads.append(frozenset(app_ids))
        return self._inner.read(app_ids)

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        return self._inner.confirm(app_id)

    def stop(self) -> None:
        self._inner.stop()


class CountingHub:
    """A :class:`WatchHub` over the backends' own readers, counting them and their reads.

    It lingers as the process's hub does (a view outlives its last subscriber a while);
    close :attr:`hub` at the end of the test.

    Attributes:
        readers: How many readers (one per shared view) were built.
        reads: The app ids of each read, in order.
        hub: The hub.
    """

    def __init__(self) -> None:
        self.readers = 0
        self.reads: list[frozenset[str]] = []
        self.hub = WatchHub(resolve=self._resolve, linger=hub_module.LINGER_S)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> CountingHub:
        """Makes it the process's hub (what ``get_hub()`` returns) for one test."""
        monkeypatch.setattr(hub_module, "_HUB", self.hub)
        return self

    def most_read(self) -> int:
        """The most jobs one read covered."""
        return max((len(r) for r in self.reads), default=0)

    def _resolve(self, scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
        target = resolve_target(scheduler, app_id)
        return dataclasses.replace(target, make_reader=lambda: self._reader(target))

    def _reader(self, target: FollowTarget) -> Reader:
        self.readers += 1
        return _CountedReader(target.make_reader(), self.reads)
