"""``ray``: run apps on a Ray cluster through the Ray Jobs API.

Prerequisites: a Ray cluster whose dashboard (Jobs API) tether can reach (its address from the
``address`` scheduler parameter, ``$TETHER_RAY_ADDRESS``, ``$RAY_API_SERVER_ADDRESS``, an
``http://`` ``$RAY_ADDRESS``, else ``http://127.0.0.1:8265``), and ``ray[default]`` on the
submitting machine (``pip install 'tether[ray]'``), imported only when the scheduler first
talks to the cluster: ``--dryrun`` renders the submission offline.

Try it locally: ``python -m tests.e2e.infra.ray`` starts a Ray head bound to 127.0.0.1 on
free ports with a temporary directory and prints the address to use.

**Design.** An app is one Ray job (submission id = app id). Its entrypoint is tether's driver
(:mod:`tether.schedulers.ray.driver`, shipped in ``py_modules``; it needs only ``ray``), which
reserves one placement group with a bundle per replica (CPUs, GPUs, memory;
``placement_strategy`` PACK/SPREAD/STRICT_PACK/STRICT_SPREAD), sets ``$TETHER_RANK0_HOST`` to
the node address of replica 0 and runs every replica's argv as a Ray task on its bundle, with
the replica environment of :func:`tether.schedulers.replica.materialize`. Each replica's
output lines are written to the job log prefixed ``[role/k]``; ``log_iter`` selects them.
A workspace directory becomes the job's ``working_dir``; ``pip``/``env`` options go into the
``runtime_env``. The required replicas start together (gang) or not at all; a role with
``min_replicas`` needs only that many placed, and replicas beyond it start if they fit within
``elastic_wait`` seconds (``$TETHER_NUM_REPLICAS`` is the number started).

**Status** is the Jobs API's (:data:`tether.schedulers.ray.status.JOB_STATE`) with its message
(a failed replica names its role, index and exit code). **Cancel** is ``stop_job``. **Job
identity**: the job key is in the job's metadata (``tether.job_key``); ``list`` and
``find_jobs`` read the metadata (the Runner's ``run_or_attach`` re-attaches by it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.ray.scheduler import RayScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> RayScheduler:
    """Creates the ``ray`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.ray.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.ray.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
