"""Pure rendering: AppDef + :class:`LsfOpts` -> a ``bsub`` job script (no I/O).

One LSF job per app. It asks for one host slot group per replica: ``-n`` = replicas x slots
per replica, ``span[ptile=<slots>]`` so that each host holds exactly one replica, memory as
``rusage[mem=]`` per slot, GPUs per host with ``-gpu``. The script reads the allocated hosts
from ``$LSB_MCPU_HOSTS``, starts replica ``i`` on host ``i`` with ``blaunch`` (the replica
environment from :func:`~tether.schedulers.replica.materialize`, ``$TETHER_RANK0_HOST`` = the
first host) writing ``<log_dir>/<app>/<role>/<k>.log`` and ``<k>.exit``, and exits with the
first failure (LSF then ends the other tasks).

Overlays (:mod:`tether.specs.overlays`) are merged last into the ``#BSUB`` directives, a dict
of option -> the text after it (a list repeats the option; ``""`` is a bare flag):
``set_overlay(app or role, "lsf", "bsub", {"-q": "gpu", "-app": "ml", DEL("-W"): None})``,
the app's first, then each role's. ``-J`` and ``-Jd`` (tether's identity of the job) cannot
be changed.
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
class LsfRequest:
    """A rendered LSF submission.

    Attributes:
        name: The LSF job name.
        script: The job script (``bsub < script``).
        log_dir: The app's log directory.
        description: The job description (tether's identity of the app).
        env: Each replica's environment (for the masked dry-run), keyed ``role/k``.
    """

    name: str
    script: str
    log_dir: str
    description: str
    env: dict[str, dict[str, str]] = field(default_factory=dict)


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
    first = app.roles[0]
    shape = (slots(first), max(first.resource.gpu, 0), max(first.resource.memMB, 0))
    for role in app.roles:
        if not _ROLE_DIR.match(role.name):
            raise LsfRenderError(
                f"role {role.name!r}: lsf names log files after roles; use letters, digits, "
                "'_', '.', '-'"
            )
        got = (slots(role), max(role.resource.gpu, 0), max(role.resource.memMB, 0))
        if got != shape:
            raise LsfRenderError(
                f"role {role.name!r}: one LSF job gives every host the same slots, GPUs and "
                f"memory, but this role asks for (slots, gpus, memMB)={got} while role "
                f"{first.name!r} asks for {shape}; give the roles the same resource or submit "
                "them as separate apps"
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


def encode_description(app: AppDef, log_dir: str) -> str:
    """tether's identity of the app in the LSF job description.

    Args:
        app: The app.
        log_dir: The app's log directory.

    Returns:
        ``tether:app=..;logs=..;roles=r:2,s:1[;key=..]`` (values percent-encoded).
    """
    parts = {
        "app": app.name,
        "logs": log_dir,
        "roles": ",".join(f"{r.name}:{r.num_replicas}" for r in app.roles),
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


def _directives(app: AppDef, opts: LsfOpts, name: str, log_dir: str, cwd: str,
                desc: str) -> Directives:  # fmt: skip
    role = app.roles[0]
    per = slots(role)
    total = sum(r.num_replicas for r in app.roles)
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
    out["-n"] = str(per * total)
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


def _overlay(directives: Directives, app: AppDef) -> None:
    """Merges the ``bsub`` overlays (the app's, then each role's) into the directives, last.

    Raises:
        LsfRenderError: For an overlay that changes ``-J``/``-Jd``, names no ``-option`` or
            gives a value that is not text (or holds a newline).
    """
    sources: list[tuple[str, AppDef | Role]] = [(f"app {app.name!r}", app)]
    sources += [(f"role {r.name!r}", r) for r in app.roles]
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


def render(app: AppDef, opts: LsfOpts, name: str, log_root: str, cwd: str) -> LsfRequest:
    """Renders the job script of ``app`` (pure).

    Args:
        app: The app (validated and checked).
        opts: The options.
        name: The LSF job name (also the ``${app_id}`` macro).
        log_root: The ``log_dir`` option made absolute.
        cwd: The job's working directory.

    Returns:
        The request.
    """
    log_dir = f"{log_root.rstrip('/')}/{name}"
    desc = encode_description(app, log_dir)
    directives = _directives(app, opts, name, log_dir, cwd, desc)
    _overlay(directives, app)  # last: the platform's escape hatch wins
    lines = _header(directives)
    total = sum(r.num_replicas for r in app.roles)
    lines += [
        "",
        "set -u",
        f"LOGS={shlex.quote(log_dir)}",
        "mkdir -p " + " ".join(f'"$LOGS/{r.name}"' for r in app.roles),
        "# the allocated hosts in order, one per replica ($LSB_MCPU_HOSTS: host slots ...)",
        "read -r -a HOSTS <<< \"$(echo \"${LSB_MCPU_HOSTS:-localhost 1}\" | "
        "awk '{for (i = 1; i <= NF; i += 2) printf \"%s \", $i}')\"",
        'RANK0_HOST="${HOSTS[0]}"',
        "PIDS=()",
    ]
    envs: dict[str, dict[str, str]] = {}
    index = 0
    for role in app.roles:
        for k in range(role.num_replicas):
            rep = materialize(role, app_id=name, replica_id=k, rank0_host="", img_root=cwd)
            env = {n: v for n, v in rep.env.items() if n != ENV_RANK0_HOST}
            envs[f"{role.name}/{k}"] = env
            assigns = [shlex.quote(f"{n}={v}") for n, v in env.items()]
            assigns.append(f'"{ENV_RANK0_HOST}=$RANK0_HOST"')
            argv = " ".join(shlex.quote(a) for a in [rep.entrypoint, *rep.args])
            out = f'"$LOGS/{role.name}/{k}'
            lines += [
                f"# {role.name} replica {k}",
                f'( blaunch "${{HOSTS[{index} % ${{#HOSTS[@]}}]}}" env {" ".join(assigns)} '
                f'{argv} > {out}.log" 2>&1; rc=$?; echo "$rc" > {out}.exit"; exit "$rc" ) &',
                "PIDS+=($!)",
            ]
            index += 1
    lines += [
        f"# exit with the first failure of the {total} replica(s); LSF ends the other tasks",
        "FAIL=0",
        'for _ in "${PIDS[@]}"; do',
        '    wait -n; rc=$?',
        '    if [ "$rc" -ne 0 ]; then FAIL=$rc; break; fi',
        "done",
        'for f in "$LOGS"/*/*.exit; do',
        '    [ -e "$f" ] || continue; c=$(cat "$f")',
        '    r=${f#"$LOGS"/}; r=${r%.exit}',
        '    [ "$c" = 0 ] || echo "tether: replica $r exited with code $c" >&2',
        "done",
        'exit "$FAIL"',
        "",
    ]
    return LsfRequest(name=name, script="\n".join(lines), log_dir=log_dir, description=desc,
                      env=envs)


def format_request(req: LsfRequest) -> str:
    """The script as ``bsub`` receives it, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    text = req.script
    for env in req.env.values():
        for n, masked in mask_env(env).items():
            if masked != env[n]:
                text = text.replace(shlex.quote(f"{n}={env[n]}"), shlex.quote(f"{n}={masked}"))
    return text


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
