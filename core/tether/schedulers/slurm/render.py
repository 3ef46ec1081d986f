"""sbatch scripts from an :class:`~tether.specs.AppDef`: pure functions, golden-tested.

:func:`render` turns an app plus :class:`~tether.schedulers.slurm.options.SlurmOpts` into a
:class:`SlurmRequest`: the batch script and the ``sbatch`` arguments that go with it. Nothing
here runs a Slurm command, so ``--dryrun`` works on any machine.

Shape of the script:

* one role: one job; several roles: a heterogeneous job, one component per role (``#SBATCH
  hetjob`` between them), role ``i`` launched with ``srun --het-group=i``;
* each replica is one Slurm task of its role's step; the task picks its replica's command
  line and environment (rendered through :func:`tether.schedulers.replica.materialize`) by
  ``$SLURM_PROCID``; ``${app_id}`` stands for ``$SLURM_JOB_ID``;
* ``$TETHER_RANK0_HOST`` is the address of the first node of the first role
  (``scontrol show hostnames``, then that node's ``NodeAddr``), exported before any ``srun``;
* every task writes ``<job_dir>/<job name>-<job id>/<role>-<replica>.out`` (stdout and
  stderr, through srun) and, with ``split_streams``, copies its streams to ``.stdout`` and
  ``.stderr`` next to it (``tee``); the batch script writes ``<job_dir>/<job name>-<job id>.out``;
* each component's ``#SBATCH`` options come from the run options and resources, then the
  app's and the role's overlay (:mod:`.overlay`), applied last;
* the roles' steps run side by side; when one fails the others are stopped and the script
  exits with its code. With ``RetryPolicy.REPLICA`` a task reruns its command up to
  ``max_retries`` times; with ``APPLICATION`` the script starts every role's steps again, in
  the same allocation, up to the app's budget (the largest ``max_retries`` of its
  ``APPLICATION`` roles, see :mod:`tether.schedulers.retries`) times (each restart appends a
  byte to ``<log dir>/.restarts-app``).

The job identity (:data:`~tether.schedulers.api.JOB_KEY`) and the role layout go in the
job's comment as a marker ``[tether:...]`` after the user's comment (see :func:`make_comment`).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.replica import materialize
from tether.schedulers.retries import application_retries
from tether.schedulers.slurm.options import (
    CONTAINER_OPTIONS,
    CONTAINER_PYXIS,
    GPU_REQUEST_OPTIONS,
    GPUS_GRES,
    MAIL_TYPES,
    SlurmOpts,
)
from tether.schedulers.slurm.overlay import overlaid_flags
from tether.schedulers.slurm.workspace import META_WORKSPACE_DIR
from tether.specs import AppDef, BindMount, RetryPolicy, Role

MARKER = "tether"
RESTARTS_FILE = ".restarts-"
"""``REPLICA`` retries: each restart of a task appends a byte to ``<log dir>/.restarts-<job
id>-<task>`` (the component's job id), which ``describe`` counts (Slurm does not see them)."""
EXIT_FILE_PREFIX = ".exit-"
"""Heterogeneous jobs: ``<log dir>/.exit-<role stem>`` holds each role's step exit code."""
_APP_ID = "\x00tether-app-id\x00"
_RANK0 = "\x00tether-rank0-host\x00"
_SHELL_VARS = {_APP_ID: "${SLURM_JOB_ID}", _RANK0: "${TETHER_RANK0_HOST}"}
_SENTINELS = re.compile("(" + "|".join(re.escape(s) for s in _SHELL_VARS) + ")")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MARKER_RE = re.compile(r"\[" + MARKER + r":([^\]]*)\]\s*$")
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|"
                   r"\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$", re.IGNORECASE)  # fmt: skip


class SlurmConfigError(SpecError):
    """An app or run options the slurm scheduler cannot render; the message says why."""


@dataclass
class SlurmRequest:
    """What ``sbatch`` is given: a script and its command-line arguments.

    Attributes:
        script: The batch script.
        sbatch_args: Arguments before the script's path (``--parsable``, ``--comment``...).
        job_dir: Where the job runs and writes its logs.
        job_name: The Slurm job name.
        roles: The roles' names, in het-group order.
    """

    script: str
    sbatch_args: list[str]
    job_dir: str
    job_name: str
    roles: list[str] = field(default_factory=list)


def format_request(req: SlurmRequest) -> str:
    """The request as a user reads it in a dry-run: the sbatch command, then the script.

    Args:
        req: The request.

    Returns:
        Text.
    """
    cmd = shlex.join(["sbatch", *req.sbatch_args, f"{req.job_dir}/<script>"])
    return f"# {cmd}\n{req.script}"


# ---- names -------------------------------------------------------------------------------------
def job_name(app_name: str) -> str:
    """A Slurm job name for an app: its name with anything unusual replaced by ``_``."""
    name = _SAFE.sub("_", app_name).strip("_") or "app"
    return name[:100]


def log_stems(roles: Sequence[str]) -> list[str]:
    """File-name stems of the roles' logs: the names made safe, unique by index on a clash.

    Args:
        roles: Role names in order.

    Returns:
        One stem per role.
    """
    safe = [_SAFE.sub("_", r).strip("_") or "role" for r in roles]
    return [s if safe.count(s) == 1 else f"{s}-{i}" for i, s in enumerate(safe)]


def default_job_dir() -> str:
    """``$TETHER_STATE_DIR/slurm``, else ``~/.local/state/tether/slurm``."""
    base = os.environ.get("TETHER_STATE_DIR") or str(Path.home() / ".local" / "state" / "tether")
    return str(Path(base) / "slurm")


# ---- the comment marker ------------------------------------------------------------------------
@dataclass
class Marker:
    """What tether records in a job's comment.

    Attributes:
        roles: Role names and replica counts, in het-group order.
        job_key: The job identity, if any.
        user_comment: The user's own comment.
        split_streams: The replicas keep stdout and stderr in separate files too.
    """

    roles: list[tuple[str, int]]
    job_key: str | None = None
    user_comment: str = ""
    split_streams: bool = False


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def make_comment(marker: Marker) -> str:
    """The job comment: the user's comment, then ``[tether:roles=NAME.N,...;key=KEY]``.

    Args:
        marker: What to record.

    Returns:
        The comment.
    """
    parts = ["roles=" + ",".join(f"{_q(n)}.{k}" for n, k in marker.roles)]
    if marker.job_key is not None:
        parts.append("key=" + _q(marker.job_key))
    if marker.split_streams:
        parts.append("streams=split")
    tag = f"[{MARKER}:{';'.join(parts)}]"
    return f"{marker.user_comment} {tag}" if marker.user_comment else tag


def parse_comment(comment: str | None) -> Marker | None:
    """Reads the marker back from a job's comment.

    Args:
        comment: The comment (None or without a marker: not a tether job).

    Returns:
        The marker, or None.
    """
    m = _MARKER_RE.search(comment or "")
    if m is None:
        return None
    fields = dict(p.split("=", 1) for p in m.group(1).split(";") if "=" in p)
    roles: list[tuple[str, int]] = []
    for item in filter(None, fields.get("roles", "").split(",")):
        name, _, count = item.rpartition(".")
        roles.append((urllib.parse.unquote(name), int(count) if count.isdigit() else 1))
    key = fields.get("key")
    return Marker(
        roles=roles,
        job_key=urllib.parse.unquote(key) if key is not None else None,
        user_comment=(comment or "")[: m.start()].rstrip(),
        split_streams=fields.get("streams") == "split",
    )


# ---- checks ------------------------------------------------------------------------------------
def _close(value: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_opts(opts: SlurmOpts, app: AppDef) -> None:
    """Checks the run options against each other and the app.

    Args:
        opts: The options.
        app: The app.

    Raises:
        SlurmConfigError: Naming every bad option, its value and what is allowed.
    """
    errs: list[str] = []
    if opts.gpu_request not in GPU_REQUEST_OPTIONS:
        errs.append(
            f"gpu_request={opts.gpu_request!r} is not allowed"
            f"{_close(opts.gpu_request, GPU_REQUEST_OPTIONS)}; "
            f"allowed: {', '.join(GPU_REQUEST_OPTIONS)}"
        )
    if opts.container_runtime not in CONTAINER_OPTIONS:
        errs.append(
            f"container_runtime={opts.container_runtime!r} is not allowed"
            f"{_close(opts.container_runtime, CONTAINER_OPTIONS)}; "
            f"allowed: {', '.join(CONTAINER_OPTIONS)}"
        )
    if opts.replicas_per_node < 0:
        errs.append(f"replicas_per_node={opts.replicas_per_node} must be 0 or more")
    if opts.time is not None and not _TIME.match(opts.time.strip()):
        errs.append(
            f"time={opts.time!r} is not a Slurm time limit; use MINUTES, MM:SS, HH:MM:SS, "
            "D-HH, D-HH:MM or D-HH:MM:SS"
        )
    if opts.mail_type is not None:
        for t in opts.mail_type.split(","):
            if t.strip().upper() not in MAIL_TYPES:
                errs.append(
                    f"mail_type={opts.mail_type!r}: {t.strip()!r} is not a mail type"
                    f"{_close(t.strip().upper(), MAIL_TYPES)}; allowed: {', '.join(MAIL_TYPES)}"
                )
    if opts.nodelist and len(app.roles) > 1:
        errs.append(
            f"nodelist={opts.nodelist!r} cannot be used with {len(app.roles)} roles (every "
            "component of a heterogeneous job would need all the nodes); use constraint or "
            "exclude"
        )
    if opts.split_streams and opts.container_runtime == CONTAINER_PYXIS:
        errs.append(
            "split_streams=True cannot be used with container_runtime=pyxis (the log "
            "directory is not mounted in the container)"
        )
    if opts.workspace_dir is not None and not os.path.isabs(opts.workspace_dir):
        errs.append(f"workspace_dir={opts.workspace_dir!r} must be an absolute path")
    if opts.job_dir is not None and (
        not opts.job_dir or re.search(r"[\s%]", opts.job_dir) or not os.path.isabs(opts.job_dir)
    ):
        errs.append(f"job_dir={opts.job_dir!r} must be an absolute path without whitespace or '%'")
    for arg in opts.sbatch_args:
        if not arg.startswith("-"):
            errs.append(f"sbatch_args: {arg!r} is not a flag; give each as '--name=value'")
        elif arg.split("=", 1)[0] in ("--parsable", "--comment", "--wrap", "--hetjob"):
            errs.append(f"sbatch_args: {arg!r} is set by tether; use its run option instead")
    if errs:
        raise SlurmConfigError("invalid slurm run options:\n  - " + "\n  - ".join(errs))


def check_app(app: AppDef, opts: SlurmOpts) -> None:
    """Checks what Slurm needs beyond the capabilities check.

    Args:
        app: The app.
        opts: The options.

    Raises:
        SlurmConfigError: Naming the role and field.
    """
    errs: list[str] = []
    for role in app.roles:
        where = f"role {role.name!r}"
        if not role.entrypoint:
            errs.append(f"{where}: entrypoint is empty; slurm runs a program")
        if role.mounts and opts.container_runtime != CONTAINER_PYXIS:
            errs.append(
                f"{where}: mounts {[str(m) for m in role.mounts]} need a container runtime "
                "(slurm runs the program directly on the nodes, which already see their "
                "filesystems); set container_runtime=pyxis or drop the mounts"
            )
        if opts.container_runtime == CONTAINER_PYXIS and not role.image:
            errs.append(f"{where}: image is empty; container_runtime=pyxis runs Role.image")
        if role.workspace is not None and META_WORKSPACE_DIR not in role.metadata:
            errs.append(
                f"{where}: has a workspace ({role.workspace}) that was not copied; submit "
                "through the Runner (tether run --workspace), which copies it to workspace_dir"
            )
    if errs:
        raise SlurmConfigError(
            f"slurm cannot run app {app.name!r}:\n  - " + "\n  - ".join(dict.fromkeys(errs))
        )


# ---- resources ---------------------------------------------------------------------------------
def resource_flags(role: Role, opts: SlurmOpts) -> list[str]:
    """``#SBATCH`` flags for one role's tasks and resources.

    Args:
        role: The role.
        opts: The options.

    Returns:
        Flags such as ``--ntasks=2``, ``--cpus-per-task=4``, ``--mem=8192``.
    """
    n = role.num_replicas
    per_node = opts.replicas_per_node
    res = role.resource
    flags = [f"--ntasks={n}"]
    if per_node == 1:
        flags += [f"--nodes={n}", "--ntasks-per-node=1"]
    elif per_node > 1:
        flags += [f"--nodes={math.ceil(n / per_node)}", f"--ntasks-per-node={per_node}"]
    cpus = math.ceil(res.cpu) if res.cpu > 0 else 0
    if cpus:
        flags.append(f"--cpus-per-task={cpus}")
    if res.memMB > 0:
        if per_node == 0:
            flags.append(f"--mem-per-cpu={math.ceil(res.memMB / max(cpus, 1))}M")
        else:
            flags.append(f"--mem={res.memMB * per_node}M")
    if res.gpu > 0:
        if opts.gpu_request == GPUS_GRES:
            flags.append(f"--gres=gpu:{res.gpu * max(per_node, 1)}")
        elif per_node == 1:
            flags.append(f"--gpus-per-node={res.gpu}")
        else:
            flags.append(f"--gpus-per-task={res.gpu}")
    return flags


def _component_flags(role: Role, opts: SlurmOpts) -> list[str]:
    flags: list[str] = []
    for name, val in (
        ("partition", opts.partition), ("time", opts.time), ("account", opts.account),
        ("qos", opts.qos), ("constraint", opts.constraint), ("nodelist", opts.nodelist),
        ("exclude", opts.exclude),
    ):  # fmt: skip
        if val:
            flags.append(f"--{name}={val}")
    if opts.exclusive:
        flags.append("--exclusive")
    flags += resource_flags(role, opts)
    flags += list(opts.sbatch_args)
    return flags


# ---- the task's shell --------------------------------------------------------------------------
def shell_word(value: str) -> str:
    """Quotes ``value`` for the shell, expanding only tether's placeholders (job id, rank-0 host).

    Args:
        value: The text.

    Returns:
        A shell word.
    """
    parts = [p for p in _SENTINELS.split(value) if p]
    if not parts:
        return "''"
    return "".join(f'"{_SHELL_VARS[p]}"' if p in _SHELL_VARS else shlex.quote(p) for p in parts)


def _replica_command(rep: Role, role: Role) -> str:
    env_words = [shell_word(f"{k}={v}") for k, v in sorted(rep.env.items())]
    argv = " ".join(shell_word(a) for a in [rep.entrypoint, *rep.args])
    cmd = f"env {' '.join(env_words)} {argv}" if env_words else argv
    if role.max_retries > 0 and role.retry_policy == RetryPolicy.REPLICA:
        r = role.max_retries
        return (
            f"n=0; while :; do {cmd}; rc=$?; "
            f'if [ "$rc" -eq 0 ] || [ "$n" -ge {r} ]; then exit "$rc"; fi; n=$((n+1)); '
            f'printf x >> "$TETHER_SLURM_LOGS"/{RESTARTS_FILE}"$SLURM_JOB_ID-$SLURM_PROCID"; '
            f'echo "tether: replica exited with $rc; restart $n of {r}" >&2; done'
        )
    return f"exec {cmd}"


def task_script(role: Role, stem: str | None = None) -> str:
    """The shell program each task of ``role`` runs: its replica chosen by ``$SLURM_PROCID``.

    Args:
        role: The role.
        stem: The role's log-file stem: the task also copies its stdout and stderr to
            ``$TETHER_SLURM_LOGS/<stem>-<replica>.stdout`` / ``.stderr`` (srun's ``--output``
            file keeps both, interleaved).

    Returns:
        The program (for ``bash -c``).
    """
    lines = []
    if stem is not None:
        base = '"$TETHER_SLURM_LOGS"/' + shlex.quote(stem) + '-"$SLURM_PROCID"'
        lines.append(f"exec > >(tee -a {base}.stdout) 2> >(tee -a {base}.stderr >&2)")
    lines.append('case "$SLURM_PROCID" in')
    for k in range(role.num_replicas):
        rep = materialize(role, app_id=_APP_ID, replica_id=k, rank0_host=_RANK0)
        lines.append(f"  {k}) {_replica_command(rep, role)} ;;")
    lines.append('  *) echo "tether: no replica $SLURM_PROCID" >&2; exit 97 ;;')
    lines.append("esac")
    return "\n".join(lines)


def _srun(role: Role, index: int, stem: str, opts: SlurmOpts, het: bool) -> str:
    argv = ["srun"]
    if het:
        argv.append(f"--het-group={index}")
    argv += [
        f"--ntasks={role.num_replicas}", "--kill-on-bad-exit=1", "--open-mode=append",
        "--unbuffered",
    ]  # fmt: skip
    if role.metadata.get(META_WORKSPACE_DIR):
        argv.append(f"--chdir={role.metadata[META_WORKSPACE_DIR]}")
    words = [shlex.quote(a) for a in argv]
    words.append(f'--output="$tether_logs"/{shlex.quote(stem + "-%t.out")}')
    if opts.container_runtime == CONTAINER_PYXIS:
        words.append(shlex.quote(f"--container-image={role.image}"))
        binds = [m for m in role.mounts if isinstance(m, BindMount)]
        if binds:
            spec = ",".join(
                f"{m.src_path}:{m.dst_path}" + (":ro" if m.read_only else "") for m in binds
            )
            words.append(shlex.quote(f"--container-mounts={spec}"))
    tee_stem = stem if opts.split_streams else None
    words += ["bash", "-c", shlex.quote(task_script(role, tee_stem))]
    return " ".join(words)


_PROLOGUE = """\
set -u
tether_nodes="${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"
tether_rank0_node=$(scontrol show hostnames "$tether_nodes" | head -n1)
tether_rank0_addr=$(scontrol show node "$tether_rank0_node" -o 2>/dev/null \\
  | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
export TETHER_RANK0_HOST="${tether_rank0_addr:-$tether_rank0_node}"
tether_logs=JOB_DIR/"${SLURM_JOB_NAME}-${SLURM_JOB_ID}"
mkdir -p -m 700 "$tether_logs"
export TETHER_SLURM_LOGS="$tether_logs"
tether_pids=()
"""

_EPILOGUE = """\
tether_rc=0
tether_left=${#tether_pids[@]}
while [ "$tether_left" -gt 0 ]; do
  wait -n; tether_st=$?
  tether_left=$((tether_left - 1))
  if [ "$tether_st" -ne 0 ] && [ "$tether_rc" -eq 0 ]; then
    tether_rc=$tether_st
    echo "tether: a role's step exited with $tether_st; stopping the others" >&2
    kill "${tether_pids[@]}" 2>/dev/null
  fi
done
"""


def render(app: AppDef, opts: SlurmOpts) -> SlurmRequest:
    """Renders the sbatch script and arguments of ``app``.

    Args:
        app: The app (validated).
        opts: The options (checked with :func:`check_opts`).

    Returns:
        The request.
    """
    name = job_name(app.name)
    job_dir = opts.job_dir or default_job_dir()
    het = len(app.roles) > 1
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}"]
    lines.append(f"#SBATCH --output={job_dir}/%x-%j.out")
    lines.append(f"#SBATCH --chdir={job_dir}")
    if opts.mail_user:
        lines.append(f"#SBATCH --mail-user={opts.mail_user}")
    if opts.mail_type:
        lines.append(f"#SBATCH --mail-type={opts.mail_type.upper()}")
    app_retries = application_retries(app.roles)  # the app's budget, whichever role fails
    lines.append("#SBATCH --requeue" if opts.requeue else "#SBATCH --no-requeue")
    notes = []
    for i, role in enumerate(app.roles):
        if i:
            lines.append("#SBATCH hetjob")
        # overlays last: the app's, then the role's, win over what tether rendered
        flags, touched = overlaid_flags(_component_flags(role, opts), app, role)
        lines += [f"#SBATCH {f}" for f in flags]
        if touched:
            notes.append(f"# tether: role {role.name}: overlay slurm/sbatch: {', '.join(touched)}")
    lines += notes
    for role in app.roles:
        ignored = [*role.resource.capabilities, *role.resource.devices]
        if ignored:
            lines.append(
                f"# tether: role {role.name}: {', '.join(map(str, ignored))} not requested "
                "(no Slurm equivalent; use constraint or sbatch_args)"
            )
    lines.append(_PROLOGUE.replace("JOB_DIR", shlex.quote(job_dir)).rstrip("\n"))
    stems = log_stems([r.name for r in app.roles])
    body: list[str] = []
    for i, role in enumerate(app.roles):
        body.append(f"# role {i}: {role.name} ({role.num_replicas} replica(s))")
        if het:  # record each role's exit code; the epilogue's kill stops the step too
            body += [
                "(",
                "  trap 'kill \"${tether_step:-}\" 2>/dev/null' TERM",
                "  " + _srun(role, i, stems[i], opts, het) + " &",
                '  tether_step=$!; wait "$tether_step"; tether_st=$?',
                f'  echo "$tether_st" > "$tether_logs"/{shlex.quote(EXIT_FILE_PREFIX + stems[i])}',
                '  exit "$tether_st"',
                ") &",
            ]
        else:
            body.append(_srun(role, i, stems[i], opts, het) + " &")
        body.append("tether_pids+=($!)")
    body += _EPILOGUE.rstrip("\n").splitlines()
    if app_retries:  # every role's steps again, in the same allocation
        restarts = shlex.quote(RESTARTS_FILE + "app")
        lines += ["tether_attempt=0", "while :; do", "  tether_pids=()"]
        lines += [f"  {line}" for line in body]
        lines += [
            f'  if [ "$tether_rc" -ne 0 ] && [ "$tether_attempt" -lt {app_retries} ]; then',
            "    tether_attempt=$((tether_attempt + 1))",
            f'    printf x >> "$tether_logs"/{restarts}',
            '    echo "tether: the job failed with $tether_rc; restarting every role'
            f' (restart $tether_attempt of {app_retries})" >&2',
            "    continue",
            "  fi",
            "  break",
            "done",
        ]
    else:
        lines += body
    lines.append('exit "$tether_rc"')
    marker = Marker(
        roles=[(r.name, r.num_replicas) for r in app.roles],
        job_key=app.metadata.get(JOB_KEY),
        user_comment=opts.comment or "",
        split_streams=opts.split_streams,
    )
    args = ["--parsable", f"--comment={make_comment(marker)}"]
    return SlurmRequest(
        script="\n".join(lines) + "\n",
        sbatch_args=args,
        job_dir=job_dir,
        job_name=name,
        roles=[r.name for r in app.roles],
    )
