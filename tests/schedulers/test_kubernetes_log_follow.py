"""A followed Kubernetes log when the watch hub's cache hears a replica's end before it shows
its pod started (a pod that ran for a moment: the Job's end came first). The cache is a stub
here; tests/e2e/test_kube_log_follow.py follows logs on the real apiserver."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from tether.schedulers.kubernetes.logs import followed_lines
from tether.schedulers.kubernetes.views import AppView, Replica
from tether.specs import AppState


class _EndedCache:
    """The app as the cache shows it: its replica SUCCEEDED, its pod not seen yet."""

    def __init__(self) -> None:
        self.closed = False

    def mark(self) -> Hashable:
        return 0

    def view(self) -> AppView | None:
        rep = Replica("echo", 0, 0, AppState.SUCCEEDED, pod=None)
        return AppView("ns", "echo-x", "none", AppState.SUCCEEDED, "", 0, [rep], [])

    def pod(self, name: str) -> dict[str, Any] | None:
        return None

    def wait(self, mark: Hashable, timeout: float) -> bool:
        raise AssertionError("an ended replica is not waited on")

    def close(self) -> None:
        self.closed = True


def test_a_replica_ended_before_its_pod_was_seen_is_read_once() -> None:
    cache = _EndedCache()
    reads: list[int] = []

    def read_once() -> Iterator[str]:
        reads.append(1)
        yield "hello from a short pod\n"

    def no_api() -> Any:
        raise AssertionError("no request but the one read")

    lines = list(followed_lines(lambda: cache, no_api, "ns", "echo", 0, None, None,
                                read_once=read_once))  # fmt: skip
    assert lines == ["hello from a short pod\n"] and reads == [1]
    assert cache.closed
