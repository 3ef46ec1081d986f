"""``lsf``: run apps as IBM Spectrum LSF jobs (``bsub``/``bjobs``/``bkill``).

Prerequisites: LSF's commands on PATH (source ``profile.lsf``) on a submission host, and a
file system shared with the execution hosts for the working directory and the ``log_dir``
run option. Nothing is imported beyond the standard library; ``--dryrun`` renders the job
script without LSF.

Status here: **render-only**. LSF cannot run on tether's test machines; the script is
golden-tested and executed under bash with a stand-in ``blaunch``, and the command layer is
tested against small fake ``bsub``/``bjobs``/``bkill`` programs that replay IBM's documented
output formats (``tests/schedulers/test_lsf.py``).

**Design.** One LSF job per role (roles may ask for different resources), named
``<app id>.<role>``; the app id is ``<app>-<random>``. A role's job asks for ``-n`` = replicas
x slots per replica with ``span[ptile=<slots>]`` (one replica per host), ``rusage[mem=]`` per
slot and ``-gpu "num=<gpus>"`` per host. Its script starts replica ``k`` on allocated host
``k`` with ``blaunch``, with the replica environment (``$TETHER_RANK0_HOST`` = the first host
of the first role's job), writing ``<log_dir>/<app id>/<role>/<k>.log`` and ``.exit``; the
first failure ends the role's job and the other roles' jobs. A multi-role app's jobs are
submitted held and released together (``bresume``).

**Status** is ``bjobs -o ... -json -J "<app id>.*"``: each job through
:data:`tether.schedulers.lsf.status.JOB_STATE` (an EXIT killed by its owner is CANCELLED),
combined by :func:`tether.schedulers.lsf.status.aggregate`, with the failed replicas (from
their exit files) in the message. **Cancel** is one ``bkill`` of the app's jobs. **Job
identity**: each job's description ``tether:app=..;logs=..;roles=..;role=..;key=..``
(``bsub -Jd``), read by ``list``/``find_jobs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.lsf.scheduler import LsfScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> LsfScheduler:
    """Creates the ``lsf`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.lsf.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.lsf.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
