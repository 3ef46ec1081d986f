"""``slurm``: run apps as Slurm batch jobs (heterogeneous jobs for several roles).

Prerequisites: Slurm's client commands (``sbatch``, ``squeue``, ``scontrol``, ``scancel``;
``sacct`` when the cluster keeps accounting) on the machine that submits, a cluster they
reach (``SLURM_CONF`` or ``scheduler_params={"slurm": {"slurm_conf": PATH}}``), and a
``job_dir`` that the submitting machine and the nodes both see (a shared filesystem): the job
runs there and writes its logs there. ``tether run --dryrun -s slurm ...`` renders the sbatch
script offline, without Slurm.

**Transports** (:mod:`.transport`): that is ``local``. ``ssh`` runs the same commands on a
login node over one multiplexed OpenSSH connection (:mod:`.ssh`), and ``rest`` talks to
``slurmrestd`` with a JWT (:mod:`.rest`); the render is the same for all three, and
:mod:`.connect` gives the scheduler one client interface over them.

Try it locally: ``tests/e2e/infra/setup.d/30-slurm.sh`` installs Debian's ``slurm-wlm`` and
``munge``; ``python -m tests.e2e.infra.slurm`` starts munged, slurmctld and two slurmd
"nodes" on this host (free ports, a temp dir) and prints the ``SLURM_CONF`` to export.

**Design.** One role is one job, several roles one heterogeneous job (a component per role,
``srun --het-group=i``); every replica is a task (``$SLURM_PROCID`` picks its command line and
``TETHER_*`` environment, rendered through :func:`tether.schedulers.replica.materialize`);
``$TETHER_RANK0_HOST`` is the address of the first node of the first role. The sbatch script
is built by :mod:`.render` (see there for its shape); states map through the one table in
:mod:`.status`, with Slurm's reason in ``msg``.

**Status** comes from ``squeue --json --states=all`` while Slurm remembers the job (running,
and ``MinJobAge`` seconds after it ends), then from ``sacct`` when the cluster has accounting;
without accounting an old job is unknown (``describe`` returns None).

**Retries** run inside the job: ``RetryPolicy.REPLICA`` reruns the failed task's command up to
``max_retries`` times; ``APPLICATION`` starts every role's steps again in the same allocation
(each restart is counted in the log directory; ``describe`` adds Slurm's own restart count,
from ``requeue=True`` requeues after node failure or preemption). Not ``scontrol requeue``:
Slurm 22.05 holds a requeued job for ``cred_expire`` seconds and then starts a heterogeneous
job only from a backfill pass, which an idle cluster never runs. ``ROLE`` is rejected at
dryrun (the components of a heterogeneous job cannot restart alone).

**Workspaces** (``dir``): the project is copied to ``workspace_dir`` and the role runs there
(:mod:`.workspace`).

**Job identity**: the job's comment ends with a marker ``[tether:roles=...;key=...]`` holding
the role layout and the caller's job key; :meth:`find_jobs` and :meth:`list` read it back.

**Cancel** is ``scancel`` (every component, step and task; idempotent). **Delete** cancels,
removes the job's logs and script from ``job_dir`` and leaves a marker there
(``.<name>-<id>.deleted``): Slurm's own records cannot be removed, so tether stops showing the
job (``describe`` returns None, ``list`` and ``find_jobs`` skip it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.slurm.scheduler import SlurmScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> SlurmScheduler:
    """Creates the ``slurm`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.slurm.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.slurm.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
