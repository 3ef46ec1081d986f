"""What the Runner does with an app already launched, named by its handle.

:class:`LaunchedApps` reads an app's status, waits for it to finish (driving the scheduler's
``reconcile`` on every poll), rebuilds its AppDef, lists a scheduler's apps, reads one
replica's log lines and the outputs the app published, and cancels or deletes it. It needs
nothing but the scheduler the handle names, from the
:class:`~tether.runner.pool.SchedulerPool` it is given; :class:`~tether.runner.api.Runner`
holds one and hands its public methods on to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tether.errors import NotFoundError
from tether.runner.pool import SchedulerPool
from tether.schedulers.api import ListAppResponse, Stream
from tether.specs import AppDef, AppHandle, make_app_handle, parse_app_handle
from tether.specs.states import is_terminal
from tether.tracker.outputs import outputs_root, outputs_url, read_outputs

if TYPE_CHECKING:
    from datetime import datetime

    from tether.specs.status import AppStatus
    from tether.tracker.progress import Progress


class UnknownAppError(NotFoundError):
    """The handle names an app the scheduler does not know."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"no app {app_handle!r}: the scheduler does not know it (finished apps may have "
            "been deleted; `tether list -s SCHEDULER` shows the ones it knows)"
        )


class LaunchedApps:
    """Status, waiting, logs, outputs and stopping of apps given by their handles.

    Args:
        pool: The schedulers the handles name.
    """

    def __init__(self, pool: SchedulerPool) -> None:
        self._pool = pool

    # ---- query ---------------------------------------------------------------------------
    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """The app's status, or None when the scheduler does not know it.

        Args:
            app_handle: The handle.

        Returns:
            The status.
        """
        from tether.specs.status import AppStatus  # not on a dry run's path

        sched, app_id = self._pool.for_handle(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        return AppStatus(
            state=desc.state,
            num_restarts=desc.num_restarts,
            msg=desc.msg if desc.msg != "<NONE>" else "",
            structured_error_msg=desc.structured_error_msg,
            ui_url=desc.ui_url,
            roles=desc.roles_statuses,
            failure=desc.failure,
        )

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Blocks until the app is finished.

        Schedulers that can notice completion directly (``local_cwd``) return within tens of
        milliseconds; others are polled every ``wait_interval`` seconds. Each poll first calls
        the scheduler's :meth:`~tether.schedulers.api.Scheduler.reconcile` (retries the engine
        lacks), so a waiting caller drives them; the status itself is a pure read.

        Args:
            app_handle: The handle.
            wait_interval: Seconds between polls.
            timeout: Give up after this many seconds and return the last status.

        Returns:
            The final status, or None when the app does not exist.
        """
        sched, app_id = self._pool.for_handle(app_handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sched.reconcile(app_id)
            status = self.status(app_handle)
            if status is not None and is_terminal(status.state):
                sched.reconcile(app_id)  # e.g. stop the other replicas after a final failure
            if status is None or is_terminal(status.state):
                return status
            pause = wait_interval
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return status
                pause = min(pause, left)
            sched.wait_for_change(app_id, pause)

    def reconcile(self, app_handle: AppHandle) -> None:
        """Applies what the scheduler's engine cannot do itself (see ``Scheduler.reconcile``).

        :meth:`wait` calls it on every poll; a caller that polls :meth:`status` on its own
        (an orchestrator's trigger) calls it before each poll. Idempotent.

        Args:
            app_handle: The handle.
        """
        sched, app_id = self._pool.for_handle(app_handle)
        sched.reconcile(app_id)

    def describe(self, app_handle: AppHandle) -> AppDef | None:
        """The AppDef of an app: the one this runner submitted (as TorchX), else rebuilt as
        far as the scheduler can (named after the app id).

        Args:
            app_handle: The handle.

        Returns:
            The AppDef, or None when the app does not exist.
        """
        submitted = self._pool.submitted(app_handle)
        if submitted is not None:
            return submitted
        sched, app_id = self._pool.for_handle(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        return AppDef(name=app_id, roles=desc.roles)

    def list(self, scheduler: str) -> list[ListAppResponse]:
        """The apps a scheduler knows, with their handles.

        Args:
            scheduler: The scheduler's name.

        Returns:
            The apps.
        """
        apps = self._pool.get(scheduler).list()
        for app in apps:
            app.app_handle = make_app_handle(scheduler, self._pool.name, app.app_id)
        return apps

    def log_lines(
        self,
        app_handle: AppHandle,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of a role (each ends with ``\\n``).

        Args:
            app_handle: The handle.
            role_name: The role.
            k: The replica.
            regex: Only matching lines.
            since: Only lines at or after this time.
            until: Only lines before this time.
            should_tail: Follow until the replica finishes.
            streams: stdout, stderr or combined.

        Returns:
            The lines.

        Raises:
            UnknownAppError: When the app does not exist.
        """
        sched, app_id = self._pool.for_handle(app_handle)
        if not sched.exists(app_id):
            raise UnknownAppError(app_handle)
        return sched.log_iter(app_id, role_name, k, regex, since, until, should_tail, streams)

    def outputs(self, app_handle: AppHandle) -> dict[str, Any]:
        """The outputs a (finished) app published.

        Args:
            app_handle: The handle.

        Returns:
            Output name to value.
        """
        return read_outputs(self._outputs_url(app_handle))

    def progress(self, app_handle: AppHandle) -> Progress | None:
        """The latest progress report of an app (:func:`tether.runtime.report`).

        Args:
            app_handle: The handle.

        Returns:
            The report, or None when the app reported none.
        """
        from tether.tracker.progress import read_progress  # loaded when a report is read

        return read_progress(self._outputs_url(app_handle))

    def _outputs_url(self, app_handle: AppHandle) -> str:
        parsed = parse_app_handle(app_handle)
        root = outputs_root(self._pool.config.section("tether:outputs").get("url"))
        return outputs_url(root, parsed.scheduler_backend, parsed.app_id)

    # ---- stop ----------------------------------------------------------------------------
    def cancel(self, app_handle: AppHandle) -> None:
        """Cancels the app (idempotent; returns without waiting for it to stop).

        Args:
            app_handle: The handle.
        """
        sched, app_id = self._pool.for_handle(app_handle)
        sched.cancel(app_id)

    def delete(self, app_handle: AppHandle) -> None:
        """Cancels the app if needed and removes what the scheduler keeps of it. Idempotent.

        Args:
            app_handle: The handle.
        """
        sched, app_id = self._pool.for_handle(app_handle)
        sched.delete(app_id)
