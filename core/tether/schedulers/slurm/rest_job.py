"""The JSON job description slurmrestd takes, from the rendered sbatch request.

slurmrestd does not read ``#SBATCH`` lines: a job's options travel as fields of the posted
JSON (``job`` for one component, ``jobs`` for a heterogeneous job), with the script as it is.
:func:`job_description` reads the same ``#SBATCH`` flags the render wrote (so the render is
the same for every transport) and maps each to its field of the ``v0.0.3x`` API. A flag with
no field there (``--nodelist``, ``--exclude`` and most free ``sbatch_args``) is refused with
the list of flags the REST transport carries, before anything is sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tether.schedulers.slurm.render import SlurmConfigError, SlurmRequest

JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of the batch script's environment (slurmrestd passes none of its own)."""

_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)


def _mem_mb(value: str) -> int:
    m = _MEM.match(value.strip())
    if m is None:
        raise ValueError(value)
    n, unit = int(m.group(1)), (m.group(2) or "M").upper()
    return max(1, {"K": n // 1024, "M": n, "G": n * 1024, "T": n * 1024 * 1024}[unit])


def time_minutes(value: str) -> int | None:
    """Minutes of a Slurm time limit (seconds rounded up); None for UNLIMITED.

    Args:
        value: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.

    Returns:
        Minutes, or None.
    """
    v = value.strip().upper()
    if v in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = v.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    d = int(days) if days else 0
    if days:  # D-HH[:MM[:SS]]
        h, m, s = ([*parts, 0, 0])[:3]
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:  # MM:SS
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts[:3]
    return d * 1440 + h * 60 + m + (1 if s else 0)


def _nodes(v: str) -> list[int]:
    lo, _, hi = v.partition("-")
    return [int(lo), int(hi or lo)]


_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--job-name": ("name", str),
    "--output": ("standard_output", str),
    "--error": ("standard_error", str),
    "--chdir": ("current_working_directory", str),
    "--mail-user": ("mail_user", str),
    "--mail-type": ("mail_type", str),
    "--partition": ("partition", str),
    "--account": ("account", str),
    "--qos": ("qos", str),
    "--constraint": ("constraints", str),
    "--reservation": ("reservation", str),
    "--dependency": ("dependency", str),
    "--licenses": ("licenses", str),
    "--wckey": ("wckey", str),
    "--signal": ("signal", str),
    "--comment": ("comment", str),
    "--time": ("time_limit", time_minutes),
    "--ntasks": ("tasks", int),
    "--nodes": ("nodes", _nodes),
    "--ntasks-per-node": ("tasks_per_node", int),
    "--cpus-per-task": ("cpus_per_task", int),
    "--mem": ("memory_per_node", _mem_mb),
    "--mem-per-cpu": ("memory_per_cpu", _mem_mb),
    "--gpus": ("gpus", str),
    "--gpus-per-node": ("gpus_per_node", str),
    "--gpus-per-task": ("gpus_per_task", str),
    "--gres": ("gres", str),
    "--nice": ("nice", int),
}
_SWITCHES: dict[str, tuple[str, Any]] = {
    "--requeue": ("requeue", True),
    # slurmrestd 21.08-22.05 (v0.0.36-v0.0.38) make any "requeue" key a requeueable job,
    # false included; "no_requeue": true is the one that gives sbatch's --no-requeue
    "--no-requeue": ("no_requeue", True),
    "--exclusive": ("exclusive", "true"),
    "--oversubscribe": ("oversubscribe", True),
    "--hold": ("hold", True),
}
REST_FLAGS = tuple(sorted([*_FIELDS, *_SWITCHES]))
"""The sbatch flags the ``rest`` transport carries."""
_JOB_WIDE = ("name", "standard_output", "current_working_directory", "mail_user", "mail_type",
             "requeue", "no_requeue", "comment")  # fmt: skip
_IGNORED = ("--parsable",)


def _apply(props: dict[str, Any], flag: str) -> None:
    name, eq, value = flag.partition("=")
    if name in _IGNORED:
        return
    if not eq and name in _SWITCHES:
        key, val = _SWITCHES[name]
        props[key] = val
        return
    if name not in _FIELDS or not eq:
        raise SlurmConfigError(
            f"sbatch flag {flag!r} has no field in slurmrestd's job description, so "
            f"transport=rest cannot submit it; flags it carries: {', '.join(REST_FLAGS)} "
            "(use transport=ssh for other flags)"
        )
    key, conv = _FIELDS[name]
    try:
        converted = conv(value)
    except ValueError:
        raise SlurmConfigError(f"sbatch flag {flag!r}: {value!r} is not a valid value") from None
    if converted is not None:
        props[key] = converted


def components(script: str) -> list[list[str]]:
    """The ``#SBATCH`` flags of each job component, in order (``hetjob`` separates them)."""
    comps: list[list[str]] = [[]]
    for line in script.splitlines():
        if not line.startswith("#SBATCH"):
            if line.startswith("#") or not line.strip():
                continue
            break  # sbatch stops at the first command, so does this
        word = line[len("#SBATCH") :].strip()
        if word == "hetjob":
            comps.append([])
        elif word:
            comps[-1].append(word)
    return comps


def job_description(req: SlurmRequest) -> dict[str, Any]:
    """The body of ``POST /slurm/<version>/job/submit`` for ``req``.

    Args:
        req: The rendered request.

    Returns:
        ``{"script": ..., "job": {...}}``, or ``{"script": ..., "jobs": [...]}`` for a
        heterogeneous job.

    Raises:
        SlurmConfigError: For a flag slurmrestd's job description has no field for.
    """
    jobs: list[dict[str, Any]] = []
    for flags in components(req.script):
        props: dict[str, Any] = {}
        for flag in flags:
            _apply(props, flag)
        jobs.append(props)
    for flag in req.sbatch_args:
        _apply(jobs[0], flag)
    wide = {k: jobs[0][k] for k in _JOB_WIDE if k in jobs[0]}
    for props in jobs:
        for k, v in wide.items():
            props.setdefault(k, v)
        props["environment"] = {"PATH": JOB_PATH}
    if len(jobs) == 1:
        return {"script": req.script, "job": jobs[0]}
    return {"script": req.script, "jobs": jobs}
