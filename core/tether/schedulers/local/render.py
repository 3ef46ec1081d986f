"""Pure rendering of ``local_cwd``: an AppDef and options -> the replicas to start."""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.schedulers.local.options import LocalOpts
from tether.schedulers.replica import replica_argv_env
from tether.specs import (
    AppDef,
    Role,
    mask_args,
    mask_env,
)

log = logging.getLogger(__name__)

BACKEND = "local_cwd"
ENV_CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


@dataclass
class ReplicaRequest:
    """How one replica is started.

    Attributes:
        role: The role's name.
        replica_id: The replica's index.
        argv: The command, macros substituted (no shell).
        env: Variables set on top of the launcher's environment.
        cwd: The working directory.
        stdout: Path of the stdout log.
        stderr: Path of the stderr log.
        combined: Path of the combined log (both streams, whole lines).
    """

    role: str
    replica_id: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdout: str
    stderr: str
    combined: str


@dataclass
class LocalRequest:
    """The native request of ``local_cwd``: every replica of an app.

    Attributes:
        app_id: The app's id (chosen at render time).
        app_name: The app's name.
        log_dir: The app's log directory.
        grace_period: Seconds between SIGTERM and SIGKILL.
        roles: The replicas of each role, in app order.
    """

    app_id: str
    app_name: str
    log_dir: str
    grace_period: float
    roles: dict[str, list[ReplicaRequest]] = field(default_factory=dict)

    def replicas(self) -> list[ReplicaRequest]:
        """Every replica, role by role."""
        return [r for reps in self.roles.values() for r in reps]


def format_request(req: LocalRequest) -> str:
    """Renders a request readably, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The text.
    """
    lines = [
        f"local_cwd app {req.app_id} ({req.app_name})",
        f"  logs: {req.log_dir}",
        f"  grace period: {req.grace_period:g}s",
    ]
    for role, reps in req.roles.items():
        lines.append(f"  role {role}: {len(reps)} replica(s)")
        for r in reps:
            lines.append(f"    [{r.replica_id}] {shlex.join(mask_args(r.argv))}")
            lines.append(f"        cwd: {r.cwd}")
            for k, v in sorted(mask_env(r.env).items()):
                lines.append(f"        env: {k}={v}")
            lines.append(f"        logs: {os.path.dirname(r.combined)}/")
    return "\n".join(lines)


_NAME_JUNK = re.compile(r"[^a-z0-9]+")
_SAFE_DIR = re.compile(r"^[A-Za-z0-9_.-]+$")


def role_dir(role_name: str) -> str:
    if _SAFE_DIR.match(role_name) and role_name not in (".", ".."):
        return role_name
    import hashlib  # rarely needed: kept off the CLI's start

    digest = hashlib.sha1(role_name.encode()).hexdigest()[:8]  # noqa: S324 - a name, no security
    return f"{_NAME_JUNK.sub('-', role_name.lower()).strip('-') or 'role'}-{digest}"


def role_cwd(role: Role, default_cwd: str) -> str:
    """The directory a role's replicas run in: its workspace directory, else ``default_cwd``.

    Args:
        role: The role.
        default_cwd: The ``cwd`` run option or the current directory.

    Returns:
        An absolute path.

    Raises:
        ValueError: When the workspace is not a single unmapped directory.
    """
    ws = role.workspace
    if ws is None:
        return os.path.abspath(default_cwd)
    if not ws.is_unmapped_single_project():
        raise ValueError(
            f"role {role.name!r}: local_cwd runs replicas in one directory, but its workspace "
            f"{str(ws)!r} maps {len(ws.projects)} project(s) to "
            f"{sorted(ws.projects.values())}; use a single directory (e.g. --workspace ./)"
        )
    return os.path.abspath(os.path.expanduser(next(iter(ws.projects))))


def missing_needed_files(app: AppDef, default_cwd: str) -> list[str]:
    """What the roles need in their working directory but is not there (one line each).

    Args:
        app: The app (``Role.metadata[ROLE_NEEDS_FILES]`` names the paths).
        default_cwd: The ``cwd`` run option or the current directory.

    Returns:
        ``role 'train': train.py is not in /home/me/proj`` for each missing path.
    """
    from tether.specs.app import ROLE_NEEDS_FILES

    out = []
    for role in app.roles:
        needed = role.metadata.get(ROLE_NEEDS_FILES) or []
        if not needed:
            continue
        cwd = role_cwd(role, default_cwd)
        for rel in needed:
            path = os.path.join(cwd, os.path.expanduser(str(rel)))
            if not os.path.exists(path):
                out.append(f"role {role.name!r}: {rel} is not in {cwd} (the directory "
                           "local_cwd runs the role in)")
    return out


_NO_AUTOSET_WARNING = """
======================================================================
{replicas} replica(s) of this app ask for GPUs, but `CUDA_VISIBLE_DEVICES`
is not set for them, so they may all use the same devices (and run out
of GPU memory). To give each replica its own GPUs of this host, run with
the run option `auto_set_cuda_visible_devices=True`.
======================================================================"""

_TOO_FEW_GPUS_WARNING = """
======================================================================
Not setting `CUDA_VISIBLE_DEVICES`: this host has {available} GPU(s) but
the app's replicas ask for {requested} in total. Ask for fewer GPUs or
run on a host with more.
======================================================================"""


def auto_set_cuda_visible_devices(
    roles: Mapping[str, list[ReplicaRequest]],
    app: AppDef,
    enabled: bool,
    device_count: Callable[[], int],
) -> None:
    """Splits the host's GPUs among the replicas of the GPU roles (``CUDA_VISIBLE_DEVICES``).

    Devices are handed out in order, role by role and replica by replica, ``resource.gpu``
    each; roles without GPUs are skipped. The variable overrides a value in the role's env.
    Nothing is set (with a warning) when the option is off while replicas ask for GPUs, or
    when the host has fewer GPUs than the replicas ask for in total. On a host with 8 GPUs,
    roles ``a`` (1 replica, 2 GPUs) and ``b`` (3 replicas, 1 GPU) get ``a[0]=0,1``,
    ``b[0]=2``, ``b[1]=3``, ``b[2]=4``.

    Args:
        roles: The replicas of each role (their ``env`` is updated).
        app: The app (for the roles' GPU counts).
        enabled: The ``auto_set_cuda_visible_devices`` run option.
        device_count: Returns the number of GPUs of the host (called only when needed).
    """
    gpu_roles = [r for r in app.roles if r.resource.gpu > 0]
    requested = sum(r.resource.gpu * r.num_replicas for r in gpu_roles)
    if requested <= 0:
        return
    if not enabled:
        n = sum(r.num_replicas for r in gpu_roles)
        log.warning(_NO_AUTOSET_WARNING.format(replicas=n))
        return
    available = device_count()
    if requested > available:
        log.warning(_TOO_FEW_GPUS_WARNING.format(available=available, requested=requested))
        return
    start = 0
    for role in gpu_roles:
        for rep in roles[role.name]:
            end = start + role.resource.gpu
            rep.env[ENV_CUDA_VISIBLE_DEVICES] = ",".join(str(i) for i in range(start, end))
            start = end


def render(
    app: AppDef,
    opts: LocalOpts,
    app_id: str,
    log_dir: Path,
    default_cwd: str,
    device_count: Callable[[], int],
) -> LocalRequest:
    """The replicas of ``app`` as ``local_cwd`` starts them (pure but for GPU counting).

    Args:
        app: The app (validated).
        opts: The run options.
        app_id: The app id chosen for it.
        log_dir: The app's log directory.
        default_cwd: Where replicas run unless their role has a workspace.
        device_count: Returns the host's GPU count (called only when GPUs are split).

    Returns:
        The request.
    """
    req = LocalRequest(app_id, app.name, str(log_dir), float(opts.grace_period))
    for role in app.roles:
        cwd = role_cwd(role, default_cwd)
        reps: list[ReplicaRequest] = []
        for i in range(role.num_replicas):
            argv, env = replica_argv_env(
                role, app_id=app_id, replica_id=i, rank0_host="localhost", img_root=cwd
            )
            path = env.get("PATH") or os.environ.get("PATH", "")
            parts = (cwd, path) if opts.prepend_cwd else (path, cwd)  # TorchX appends the cwd
            env["PATH"] = os.pathsep.join(p for p in parts if p)
            rdir = log_dir / role_dir(role.name) / str(i)
            reps.append(
                ReplicaRequest(
                    role=role.name,
                    replica_id=i,
                    argv=argv,
                    env=env,
                    cwd=cwd,
                    stdout=str(rdir / "stdout.log"),
                    stderr=str(rdir / "stderr.log"),
                    combined=str(rdir / "combined.log"),
                )
            )
        req.roles[role.name] = reps
    auto_set_cuda_visible_devices(
        req.roles, app, bool(opts.auto_set_cuda_visible_devices), device_count
    )
    return req
