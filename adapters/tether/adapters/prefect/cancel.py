"""How a running tether task learns that Prefect wants it to stop.

Prefect stops a task in three ways, and each must reach the job (its ``JobSession``):

* **Task timeout** (``timeout_seconds``): Prefect raises ``CancelledError`` in the task's
  thread (a signal in the main thread, an injected exception in a worker thread). The task
  waits in short slices (:meth:`~tether.adapters.common.JobSession.follow`), so the
  exception arrives promptly and the task's ``except BaseException`` cancels the job.
* **Termination signal** (the runner or worker cancels a flow run, or the process gets
  SIGTERM): Prefect raises ``TerminationSignal`` in the main thread. A task running there
  cancels the job the same way. A task running in a worker thread (``.submit()``,
  ``.map()``) is not interrupted: the flow's task runner sets the task run's cancel event
  while it shuts down and then waits for running tasks, so :class:`CancelWatch` checks that
  event every slice.
* **Cancellation through the API** (the UI's Cancel button, ``prefect flow-run cancel``) of
  a flow run that no runner supervises (a flow started as a script): nothing signals the
  process, so :class:`CancelWatch` also reads the flow run's state every few seconds.

A termination signal sent because a user cancelled the flow run (a worker or runner stopping
the process of a cancelled run) ends the task run ``Cancelled``, not ``Crashed``:
:func:`cancelled_through_api` tells the two apart, and the task sets its own state before
leaving with Prefect's ``Abort`` (which Prefect does not turn into a crash).

When the task runner shuts down after the flow returned normally (``Completed``) with tasks
still running, the jobs are left to finish, as Prefect does with any running task.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

log = logging.getLogger(__name__)

API_POLL_SECONDS = 5.0
"""How often a running tether task reads its flow run's state from the Prefect API."""

_STOP_STATES = frozenset({"CANCELLING", "CANCELLED", "CRASHED"})
"""Flow run states that stop the job whenever they are seen."""

_LET_FINISH_STATES = frozenset({"COMPLETED"})
"""Flow run states in which a shutting-down task runner leaves running jobs alone."""


def task_runner_cancel_event(task_run_id: UUID) -> threading.Event | None:
    """The event the flow's thread-pool task runner sets when it shuts down, if any.

    Prefect keeps one per task run submitted to a ``ThreadPoolTaskRunner``; there is no
    public accessor, so this reads it defensively and returns None where the task runner
    keeps none (tasks called directly, other task runners, other Prefect versions).

    Args:
        task_run_id: The task run.

    Returns:
        The event, or None.
    """
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None) if ctx is not None else None
    events = getattr(runner, "_cancel_events", None)
    if not isinstance(events, dict):
        return None
    event = events.get(task_run_id)
    return event if isinstance(event, threading.Event) else None


class CancelWatch:
    """Tells a running tether task whether its flow run is being stopped.

    Call :meth:`reason` often (it is cheap); it reads the API at most every
    ``api_interval`` seconds (the first time ``api_interval`` after it was created, so a
    short task never waits for that read), and at once when the task runner shuts down.

    Args:
        flow_run_id: The flow run (None for a task run outside a flow: only the task
            runner's event is watched, and there is none).
        task_run_id: The task run.
        api_interval: Seconds between reads of the flow run's state.
        client: A sync Prefect client to use (not closed here); one is opened when needed
            otherwise.
    """

    def __init__(
        self,
        flow_run_id: UUID | None,
        task_run_id: UUID,
        api_interval: float = API_POLL_SECONDS,
        client: SyncPrefectClient | None = None,
    ) -> None:
        self.flow_run_id = flow_run_id
        self.api_interval = api_interval
        self._event = task_runner_cancel_event(task_run_id)
        self._client: SyncPrefectClient | None = client
        self._own_client = client is None
        self._next_read = time.monotonic() + api_interval
        self._shutdown_seen = False

    def _flow_state(self) -> str | None:
        if self.flow_run_id is None:
            return None
        if self._client is None:
            from prefect.client.orchestration import get_client

            client: Any = get_client(sync_client=True)
            client.__enter__()
            self._client = client
            self._own_client = True
        assert self._client is not None
        flow_run = self._client.read_flow_run(self.flow_run_id)
        return flow_run.state.type.value if flow_run.state is not None else None

    def reason(self) -> str | None:
        """Why the job should stop now, or None to keep going.

        Returns:
            A sentence naming what Prefect did, or None.
        """
        shutting_down = self._event is not None and self._event.is_set()
        first_shutdown_look = shutting_down and not self._shutdown_seen
        self._shutdown_seen = self._shutdown_seen or shutting_down
        now = time.monotonic()
        if not first_shutdown_look and (self.flow_run_id is None or now < self._next_read):
            return None
        self._next_read = now + self.api_interval
        try:
            state = self._flow_state()
        except Exception as e:  # the API being unreachable must not fail the job
            log.debug("cannot read the state of flow run %s: %s", self.flow_run_id, e)
            state = None
        if shutting_down:
            if state in _LET_FINISH_STATES:
                return None
            return (
                "the flow run is stopping (Prefect termination signal or flow timeout; "
                f"flow run state {state or 'unknown'})"
            )
        if state in _STOP_STATES:
            return f"the flow run {self.flow_run_id} is {state}"
        return None

    def close(self) -> None:
        """Closes the API client, if this watch opened one."""
        if self._client is not None and self._own_client:
            try:
                self._client.__exit__(None, None, None)
            finally:
                self._client = None


def cancelled_through_api(client: SyncPrefectClient | None, flow_run_id: UUID | None) -> bool:
    """Whether a termination signal comes from a cancel of the flow run (not a crash).

    The runner's control channel says so when it sent the signal for a cancel; otherwise
    the flow run's state in the API (CANCELLING or CANCELLED) decides.

    Args:
        client: A sync Prefect client (None: only the control channel is read).
        flow_run_id: The flow run.

    Returns:
        True when the flow run is being cancelled.
    """
    try:  # Prefect's own record of why the runner signals; private, so read defensively
        from prefect._internal.control_listener import get_intent

        if get_intent() == "cancel":
            return True
    except Exception as e:
        log.debug("cannot read the runner's termination intent: %s", e)
    if client is None or flow_run_id is None:
        return False
    try:
        flow_run = client.read_flow_run(flow_run_id)
    except Exception as e:
        log.debug("cannot read the state of flow run %s: %s", flow_run_id, e)
        return False
    state = flow_run.state.type.value if flow_run.state is not None else None
    return state in {"CANCELLING", "CANCELLED"}
