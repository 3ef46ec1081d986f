"""The follow path of the Runner: status, waits and watches of launched apps.

:class:`Following` reads an app's status and waits for or watches apps through the
process's watch hub (:mod:`tether.runner.follow`, imported when an app is first followed,
so that a dry run does not load it); a logical handle (``chain://...``) is followed through
its attempts by the logical jobs (:class:`~tether.runner.chains.Chains`).
:class:`~tether.runner.api.Runner` holds one and hands its ``status``, ``wait``, ``watch``,
``open_watch``, ``awatch`` and ``wait_any`` on to it; ``status`` records its runner event
here (:func:`~tether.runner.recording.recorded`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from tether.runner.logical import is_chain_handle
from tether.runner.pool import SchedulerPool
from tether.runner.recording import handle_fields, recorded
from tether.specs import AppHandle

if TYPE_CHECKING:
    from tether.runner.chains import Chains
    from tether.runner.events import AppEvent
    from tether.runner.follow import AppWatch
    from tether.specs import AppStatus


class Following:
    """Status, waits and watches of apps given by their handles, for a Runner.

    Args:
        pool: The Runner's schedulers.
        chains: The Runner's logical jobs (called only when a logical handle is met).
    """

    def __init__(self, pool: SchedulerPool, chains: Callable[[], Chains]) -> None:
        self._pool = pool
        self._chains = chains

    @recorded("status", lambda self, app_handle: handle_fields(app_handle))
    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """The app's status (see ``Runner.status``)."""
        if is_chain_handle(app_handle):
            return self._chains().status(app_handle)
        from tether.runner import follow  # the watch hub loads when an app is followed

        return follow.status(self._pool, app_handle)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Blocks until the app is finished (see ``Runner.wait``)."""
        if is_chain_handle(app_handle):  # the follower recovers (see tether.runner.chains)
            return self._chains().wait(app_handle, wait_interval, timeout)
        from tether.runner import follow  # the watch hub loads when an app is followed

        return follow.wait(self._pool, app_handle, wait_interval, timeout)

    def watch(
        self, app_handles: Iterable[AppHandle], timeout: float | None = None
    ) -> Iterator[AppEvent]:
        """Each change of many apps until all are final (see ``Runner.watch``)."""
        from tether.runner import follow  # the watch hub loads when an app is followed

        handles = list(app_handles)
        return follow.watch(self._pool, handles, timeout, chains=self._chains_of(handles))

    def open_watch(
        self, app_handles: Iterable[AppHandle], wait_interval: float = 10
    ) -> AppWatch:
        """One subscription to the apps, held across many short waits (see
        ``Runner.open_watch``)."""
        from tether.runner import follow  # the watch hub loads when an app is followed

        handles = list(app_handles)
        return follow.AppWatch(self._pool, handles, wait_interval,
                               chains=self._chains_of(handles))

    def awatch(
        self,
        app_handles: Iterable[AppHandle],
        timeout: float | None = None,
        wait_interval: float = 10,
    ) -> AsyncIterator[AppEvent]:
        """:meth:`watch` on an asyncio event loop (see ``Runner.awatch``)."""
        from tether.runner import follow  # the watch hub loads when an app is followed

        handles = list(app_handles)
        return follow.awatch(self._pool, handles, timeout, wait_interval,
                             chains=self._chains_of(handles))

    def wait_any(
        self, app_handles: Iterable[AppHandle], timeout: float | None = None
    ) -> AppEvent | None:
        """The first of the apps to finish (see ``Runner.wait_any``)."""
        from tether.runner import follow  # the watch hub loads when an app is followed

        handles = list(app_handles)
        return follow.wait_any(self._pool, handles, timeout, chains=self._chains_of(handles))

    def _chains_of(self, app_handles: Iterable[AppHandle]) -> Chains | None:
        """The logical jobs, when a handle is one (a watch follows it through its attempts;
        see :mod:`tether.runner.chain_watch`)."""
        return self._chains() if any(is_chain_handle(h) for h in app_handles) else None
