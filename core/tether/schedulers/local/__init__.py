"""``local_cwd``: the embedded default scheduler, running every replica as a local process.

Each replica is a subprocess in its own process group, started in the current directory (or
the ``cwd`` run option, or the role's workspace directory) as ``[entrypoint, *args]`` with the
launcher's environment plus the role's ``env`` and ``TETHER_ROLE_NAME``,
``TETHER_REPLICA_ID`` and ``TETHER_RANK0_HOST=localhost``. Macros are filled per replica.

Apps are durable: ``schedule`` writes the app's record under ``$TETHER_STATE_DIR/local_cwd``
(see :mod:`tether.schedulers.local.state`) and starts a detached supervisor process
(:mod:`tether.schedulers.local.supervisor`) that runs the replicas, tees their logs, applies
retries and records every change. ``describe``, ``log_iter``, ``cancel`` and ``list`` read
that record, so they work from any process and after the launcher exited; they never change
anything. When the supervisor died (say, SIGKILL), ``describe`` shows the app FAILED with the
reason, and :meth:`~.scheduler.LocalScheduler.reconcile` (called by the Runner's ``wait``,
the adapters' pollers and ``cancel``) stops the processes it left and records the outcome, so
no app stays RUNNING forever.

Retries: a failed replica of a role with ``max_retries`` left restarts per the role's
``retry_policy``: ``REPLICA`` restarts only that replica (each replica has its own
``max_retries``), ``ROLE`` restarts the role's replicas and ``APPLICATION`` every replica
(both count retries per failing role). Logs of restarted replicas are appended to, after a
``[tether] restarting ...`` line in ``stderr.log`` and ``combined.log``.

Processes: when a replica's main process exits, what is left of its process group is stopped
(as a container runtime does), and processes that left the group (``setsid``) are stopped when
the app ends (the supervisor is their subreaper). ``cancel`` stops every process group of the
app: SIGTERM, then SIGKILL after ``grace_period``.

Logs: ``stdout.log``, ``stderr.log`` and ``combined.log`` per replica (``combined.log`` is
created when the replica starts, a stream's own log with its first byte). The supervisor keeps a
small time index next to each (one entry per 10 ms of output at most), so ``since``/``until``
select lines by the time they were received, though the lines themselves carry no timestamp.

Modules: the file roles every backend has (``options``, ``render``, ``scheduler``,
``status``), then ``state`` (the directory layout, atomic writes, the app store),
``records`` (what ``state.json`` holds), ``launch`` (an app's record made, its supervisor
started and waited for), ``host`` (forks supervisors), ``supervisor`` (runs an app's
replicas: the app's policy), ``attempts`` (one run of a replica's process: started, its pipes
pumped, its end recorded), ``failures`` (a failed replica's message), ``proctable``
(``/proc`` reads and process signals, with pid-reuse guards), ``procs`` (an app's processes
found, cancelled and stopped from any process, recovery after a dead supervisor),
``logfiles`` and ``logindex`` (writing logs and their time indexes), ``logs`` (reading them),
``secretfiles`` and ``limits``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.local.scheduler import LocalScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    """Creates the ``local_cwd`` scheduler (see :class:`~.scheduler.LocalScheduler`).

    The scheduler module is imported here, not with the package: the supervisor process
    (``python -m tether.schedulers.local.supervisor``) imports the package and must start fast.

    Args:
        session_name: The runner's session.
        **kwargs: ``state_dir`` and ``gpu_count``.

    Returns:
        The scheduler.
    """
    from tether.schedulers.local.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
