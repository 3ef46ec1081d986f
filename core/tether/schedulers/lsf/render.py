"""Pure rendering: AppDef + :class:`LsfOpts` -> one ``bsub`` job script per role (no I/O).

Each role is one LSF job named ``<app id>.<role>`` (roles may ask for different resources,
and one job gives every host the same shape). A role's job asks for one host slot group per
replica: ``-n`` = replicas x slots per replica, ``span[ptile=<slots>]`` so that each host holds
exactly one replica, memory as ``rusage[mem=]`` per slot, GPUs per host with ``-gpu``. The
script reads the allocated hosts from ``$LSB_MCPU_HOSTS``, starts replica ``k`` on host ``k``
with ``blaunch`` (the replica environment from :func:`~tether.schedulers.replica.materialize`)
writing ``<log_dir>/<app>/<role>/<k>.log`` and ``<k>.exit``, and exits with the first failure
(LSF then ends the role's other tasks) after ending the other roles' jobs with ``bkill``.

``$TETHER_RANK0_HOST`` is the first host of the first role's job: that job's own script reads
it from ``$LSB_MCPU_HOSTS``; the other roles' jobs wait for it to start (``-w started()``)
and read it with ``bjobs -o first_host``. A multi-role app's jobs are submitted held (``-H``)
and released together once all exist.

Overlays (:mod:`tether.specs.overlays`) are merged last into the ``#BSUB`` directives of each
job, a dict of option -> the text after it (a list repeats the option; ``""`` is a bare flag):
``set_overlay(app or role, "lsf", "bsub", {"-q": "gpu", "-app": "ml", DEL("-W"): None})``,
the app's first (into every job), then the role's (into its job). ``-J`` and ``-Jd``
(tether's identity of the job) cannot be changed.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.lsf.options import GPU_MODES, LsfOpts
from tether.schedulers.replica import ENV_RANK0_HOST, materialize
from tether.specs import AppDef, Role
from tether.specs.overlays import apply_overlay, get_overlay
from tether.specs.secrets import mask_env

BACKEND = "lsf"
DESCRIPTION_PREFIX = "tether:"
OVERLAY_NAMESPACE = "lsf"
OVERLAY_KIND = "bsub"
"""Overlays stored with ``set_overlay(app or role, "lsf", "bsub", ...)`` merge into the
``#BSUB`` directives (option -> text after it)."""
_FIXED_DIRECTIVES = ("-J", "-Jd")

_ID_JUNK = re.compile(r"[^a-z0-9]+")
_WALL = re.compile(r"^(\d+:)?\d+$")
_ROLE_DIR = re.compile(r"^[A-Za-z0-9_.-]+$")


class LsfRenderError(SpecError):
    """An app or option that the ``lsf`` scheduler cannot express."""


@dataclass
class LsfJobRequest:
    """One ``bsub`` of an app: the job of one role.

    Attributes:
        role: The role's name.
        name: The LSF job name (:func:`job_name`).
        script: The job script (``bsub < script``).
        env: Each replica's environment (for the masked dry-run), keyed ``role/k``.
    """

    role: str
    name: str
    script: str
    env: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class LsfRequest:
    """A rendered LSF submission: one job per role, in submission order.

    Attributes:
        name: The app id (each job is named ``<app id>.<role>``).
        jobs: The jobs.
        log_dir: The app's log directory.
    """

    name: str
    jobs: list[LsfJobRequest]
    log_dir: str


def slots(role: Role) -> int:
    """Job slots of one replica: its CPUs rounded up (1 when unset).

    Args:
        role: The role.

    Returns:
        The slot count.
    """
    return max(1, math.ceil(role.resource.cpu)) if role.resource.cpu > 0 else 1


def check(app: AppDef, opts: LsfOpts) -> None:
    """Rejects what one LSF job cannot express, naming the role or option.

    Args:
        app: The app.
        opts: The options.

    Raises:
        LsfRenderError: Listing the problem.
    """
    for role in app.roles:
        if not _ROLE_DIR.match(role.name):
            raise LsfRenderError(
                f"role {role.name!r}: lsf names log files after roles; use letters, digits, "
                "'_', '.', '-'"
            )
    if opts.gpu_mode is not None and opts.gpu_mode not in GPU_MODES:
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(opts.gpu_mode.lower(), GPU_MODES, 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise LsfRenderError(
            f"run option gpu_mode={opts.gpu_mode!r} is not one of {', '.join(GPU_MODES)}{hint}"
        )
    if opts.wall_time is not None and not _WALL.match(opts.wall_time):
        raise LsfRenderError(
            f"run option wall_time={opts.wall_time!r} is not [hours:]minutes, e.g. 90 or 1:30"
        )
    for arg in opts.bsub_args:
        if not arg.startswith("-") or "\n" in arg:
            raise LsfRenderError(
                f"run option bsub_args item {arg!r} must be one bsub option starting with '-'"
            )


def encode_description(app: AppDef, log_dir: str, role: str) -> str:
    """tether's identity of the app in the LSF job description of one role's job.

    Args:
        app: The app.
        log_dir: The app's log directory.
        role: The role this job runs.

    Returns:
        ``tether:app=..;logs=..;roles=r:2,s:1;role=r[;key=..]`` (values percent-encoded).
    """
    parts = {
        "app": app.name,
        "logs": log_dir,
        "roles": ",".join(f"{r.name}:{r.num_replicas}" for r in app.roles),
        "role": role,
    }
    if app.metadata.get(JOB_KEY):
        parts["key"] = app.metadata[JOB_KEY]
    return DESCRIPTION_PREFIX + ";".join(f"{k}={quote(v, safe='')}" for k, v in parts.items())


def decode_description(text: str) -> dict[str, str] | None:
    """The fields of a description :func:`encode_description` wrote.

    Args:
        text: A job description.

    Returns:
        The fields, or None for a job tether did not submit.
    """
    if not text.startswith(DESCRIPTION_PREFIX):
        return None
    out: dict[str, str] = {}
    for part in text[len(DESCRIPTION_PREFIX):].split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k] = unquote(v)
    return out


def decode_roles(value: str) -> dict[str, int]:
    """``r:2,s:1`` -> ``{"r": 2, "s": 1}``."""
    out: dict[str, int] = {}
    for item in filter(None, value.split(",")):
        name, _, n = item.rpartition(":")
        if name and n.isdigit():
            out[name] = int(n)
    return out


Directives = dict[str, Any]
"""``#BSUB`` option -> the text after it (a list: the option repeated; ``""``: a bare flag)."""


def _directives(role: Role, opts: LsfOpts, name: str, log_dir: str, cwd: str,
                desc: str) -> Directives:  # fmt: skip
    per = slots(role)
    res = [f"span[ptile={per}]"]
    if role.resource.memMB > 0:
        res.append(f"rusage[mem={math.ceil(role.resource.memMB / per)}]")
    if opts.resource:
        res.append(opts.resource)
    out: Directives = {"-J": name, "-Jd": f'"{desc}"'}
    if opts.queue:
        out["-q"] = shlex.quote(opts.queue)
    if opts.project:
        out["-P"] = shlex.quote(opts.project)
    out["-n"] = str(per * role.num_replicas)
    out["-R"] = f'"{" ".join(res)}"'
    if role.resource.gpu > 0:
        gpu = f"num={role.resource.gpu}"
        if opts.gpu_mode:
            gpu += f":mode={opts.gpu_mode}"
        out["-gpu"] = f'"{gpu}"'
    if opts.wall_time:
        out["-W"] = opts.wall_time
    out["-cwd"] = shlex.quote(cwd)
    out["-o"] = shlex.quote(log_dir + "/lsf-%J.out")
    out["-e"] = shlex.quote(log_dir + "/lsf-%J.err")
    for arg in opts.bsub_args:
        option, _, value = arg.partition(" ")
        if option in out:
            prev = out[option]
            out[option] = [*(prev if isinstance(prev, list) else [prev]), value]
        else:
            out[option] = value
    return out


def _overlay(directives: Directives, app: AppDef, role: Role) -> None:
    """Merges the ``bsub`` overlays (the app's, then the role's) into a role's directives, last.

    Raises:
        LsfRenderError: For an overlay that changes ``-J``/``-Jd``, names no ``-option`` or
            gives a value that is not text (or holds a newline).
    """
    sources: list[tuple[str, AppDef | Role]] = [(f"app {app.name!r}", app)]
    sources.append((f"role {role.name!r}", role))
    for where, target in sources:
        overlay = get_overlay(target, OVERLAY_NAMESPACE, OVERLAY_KIND)
        if not overlay:
            continue
        fixed = {k: directives.get(k) for k in _FIXED_DIRECTIVES}
        apply_overlay(directives, overlay)
        changed = [k for k in _FIXED_DIRECTIVES if directives.get(k) != fixed[k]]
        if changed:
            raise LsfRenderError(
                f"{where}: lsf bsub overlay may not change {', '.join(changed)}: tether "
                "identifies the job by its name and description"
            )
        for option, value in directives.items():
            values = value if isinstance(value, list) else [value]
            if not option.startswith("-") or not all(
                isinstance(v, str) and "\n" not in v for v in values
            ):
                raise LsfRenderError(
                    f"{where}: lsf bsub overlay entry {option!r}: {value!r} must be a bsub "
                    "option starting with '-' and a one-line text (or a list of them)"
                )


def _header(directives: Directives) -> list[str]:
    lines = ["#!/bin/bash"]
    for option, value in directives.items():
        for v in value if isinstance(value, list) else [value]:
            lines.append(f"#BSUB {option} {v}".rstrip())
    return lines


def job_name(app_id: str, role: str) -> str:
    """The LSF job name of one role of an app: ``<app id>.<role>`` (app ids hold no ``.``).

    Args:
        app_id: The app id.
        role: The role's name.

    Returns:
        The job name.
    """
    return f"{app_id}.{role}"


def render(app: AppDef, opts: LsfOpts, name: str, log_root: str, cwd: str) -> LsfRequest:
    """Renders one job script per role of ``app`` (pure).

    Every role is its own LSF job (each host of a job has the same shape, and roles may ask
    for different resources), named :func:`job_name`. The jobs of a multi-role app are
    submitted held (``-H``) and released together once all exist, so that a failing role
    always finds its siblings to end; the jobs of roles after the first wait for the first
    role's job to start (``-w "started(...)"``) and read its first host as
    ``$TETHER_RANK0_HOST``.

    Args:
        app: The app (validated and checked).
        opts: The options.
        name: The app id (also the ``${app_id}`` macro).
        log_root: The ``log_dir`` option made absolute.
        cwd: The jobs' working directory.

    Returns:
        The request.
    """
    log_dir = f"{log_root.rstrip('/')}/{name}"
    first = job_name(name, app.roles[0].name)
    jobs = []
    for role in app.roles:
        job = job_name(name, role.name)
        desc = encode_description(app, log_dir, role.name)
        directives = _directives(role, opts, job, log_dir, cwd, desc)
        if len(app.roles) > 1:
            directives["-H"] = ""
        if job != first:
            directives["-w"] = f"'started(\"{first}\")'"
        _overlay(directives, app, role)  # last: the platform's escape hatch wins
        siblings = [job_name(name, r.name) for r in app.roles if r is not role]
        body, env = _body(role, name, log_dir, cwd, None if job == first else first, siblings)
        jobs.append(LsfJobRequest(role=role.name, name=job,
                                  script="\n".join(_header(directives) + body), env=env))
    return LsfRequest(name=name, jobs=jobs, log_dir=log_dir)


def _rank0_lines(rank0_job: str | None) -> list[str]:
    if rank0_job is None:
        return ['RANK0_HOST="${HOSTS[0]}"']
    q = shlex.quote(rank0_job)
    return [
        f"# the rank-0 host is the first host of job {rank0_job} (started before this one)",
        f"RANK0_HOST=$(bjobs -a -noheader -o first_host -J {q} 2>/dev/null | head -n 1)",
        'case "$RANK0_HOST" in ""|-)',
        f'    echo "tether: no first host of job {rank0_job}; using ${{HOSTS[0]}}" >&2',
        '    RANK0_HOST="${HOSTS[0]}" ;;',
        "esac",
    ]


def _body(role: Role, app_id: str, log_dir: str, cwd: str, rank0_job: str | None,
          siblings: list[str]) -> tuple[list[str], dict[str, dict[str, str]]]:  # fmt: skip
    """The script after the directives: start each replica with ``blaunch``, exit with the
    first failure and then end the sibling jobs (a failed replica fails the app)."""
    logs = f'"$LOGS/{role.name}'
    lines = [
        "",
        "set -u",
        f"LOGS={shlex.quote(log_dir)}",
        f'mkdir -p {logs}"',
        "# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)",
        "read -r -a HOSTS <<< \"$(echo \"${LSB_MCPU_HOSTS:-localhost 1}\" | "
        "awk '{for (i = 1; i <= NF; i += 2) printf \"%s \", $i}')\"",
        *_rank0_lines(rank0_job),
        "PIDS=()",
    ]
    envs: dict[str, dict[str, str]] = {}
    for k in range(role.num_replicas):
        rep = materialize(role, app_id=app_id, replica_id=k, rank0_host="", img_root=cwd)
        env = {n: v for n, v in rep.env.items() if n != ENV_RANK0_HOST}
        envs[f"{role.name}/{k}"] = env
        assigns = [shlex.quote(f"{n}={v}") for n, v in env.items()]
        assigns.append(f'"{ENV_RANK0_HOST}=$RANK0_HOST"')
        argv = " ".join(shlex.quote(a) for a in [rep.entrypoint, *rep.args])
        out = f"{logs}/{k}"
        lines += [
            f"# {role.name} replica {k}",
            f'( blaunch "${{HOSTS[{k} % ${{#HOSTS[@]}}]}}" env {" ".join(assigns)} '
            f'{argv} > {out}.log" 2>&1; rc=$?; echo "$rc" > {out}.exit"; exit "$rc" ) &',
            "PIDS+=($!)",
        ]
    lines += [
        f"# exit with the first failure of the {role.num_replicas} replica(s); LSF ends the "
        "other tasks",
        "FAIL=0",
        'for _ in "${PIDS[@]}"; do',
        '    wait -n; rc=$?',
        '    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi',
        "done",
        f'for f in {logs}"/*.exit; do',
        '    [ -e "$f" ] || continue; c=$(cat "$f")',
        '    r=${f#"$LOGS"/}; r=${r%.exit}',
        '    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2',
        "done",
    ]
    if siblings:
        lines += [
            "# a failed replica fails the app: end the jobs of the other roles",
            'if [ "$FAIL" -ne 0 ]; then',
            *(f"    bkill -J {shlex.quote(s)} 0 > /dev/null 2>&1 || true" for s in siblings),
            "fi",
        ]
    lines += ['exit "$FAIL"', ""]
    return lines, envs


def format_request(req: LsfRequest) -> str:
    """The scripts as ``bsub`` receives them, in submission order, with secret-looking env
    values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    texts = []
    for job in req.jobs:
        text = job.script
        for env in job.env.values():
            for n, masked in mask_env(env).items():
                if masked != env[n]:
                    text = text.replace(shlex.quote(f"{n}={env[n]}"),
                                        shlex.quote(f"{n}={masked}"))
        if len(req.jobs) > 1:
            text = f"# ---- bsub < job {job.name} ----\n{text}"
        texts.append(text)
    return "\n".join(texts)


def default_log_root(opts: LsfOpts, cwd: str) -> str:
    """The ``log_dir`` option made absolute (default ``<cwd>/.tether/lsf``).

    Args:
        opts: The options.
        cwd: The job's working directory.

    Returns:
        An absolute path.
    """
    if opts.log_dir:
        return os.path.abspath(os.path.expanduser(opts.log_dir))
    return os.path.join(cwd, ".tether", "lsf")
