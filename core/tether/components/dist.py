"""Distributed PyTorch jobs: ``dist.ddp`` and ``dist.spmd``.

Both launch ``torch.distributed.run`` (torchrun) on every node; torchrun starts
``nproc_per_node`` workers per node and sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` for them (read them with :mod:`tether.runtime`).

Rendezvous: single-node jobs use ``localhost`` with a free port. Multi-node jobs meet at rank
0's host, which each scheduler exposes in the environment variable named by
:attr:`tether.specs.macros.rank0_env` (``TETHER_RANK0_HOST``); where a scheduler leaves it
unset (on rank 0 itself on some backends) ``localhost`` is used.

Debug flags (``--debug``) set: ``CUDA_LAUNCH_BLOCKING=1``, ``NCCL_DESYNC_DEBUG=1``,
``TORCH_DISTRIBUTED_DEBUG=DETAIL``, ``TORCH_SHOW_CPP_STACKTRACES=1``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

from tether.components import DEFAULT_IMAGE
from tether.components.structured_arg import (
    StructuredJArgument,
    StructuredNameArgument,
    role_name_of,
)
from tether.specs import AppDef, Role, macros, parse_mounts, resource
from tether.specs.app import ROLE_NEEDS_FILES

TORCH_DEBUG_FLAGS: dict[str, str] = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
"""Environment set by ``--debug``."""

RDZV_BACKENDS = ("c10d", "static")

ENV_EXPERIMENT_NAME = "TETHER_TRACKING_EXPERIMENT_NAME"
"""Environment variable holding the experiment part of ``--name`` (read by trackers)."""

ENV_RUN_NAME = "TETHER_TRACKING_RUN_NAME"
"""Environment variable holding the run part of ``--name`` (TorchX's
``TORCHX_TRACKING_RUN_NAME``)."""


class _Raw(str):
    """An argument that goes into the bash command line unquoted (it holds ``${VAR}``)."""


def _bash_join(args: Iterable[str]) -> str:
    return " ".join(a if isinstance(a, _Raw) else shlex.quote(a) for a in args)


def _rdzv_endpoint(rdzv_backend: str, max_nnodes: int, rdzv_port: int) -> str:
    if max_nnodes == 1 and rdzv_backend == "c10d":
        # one agent hosts the store: any free port will do, and parallel jobs cannot clash
        return "localhost:0"
    if max_nnodes == 1:
        return f"localhost:{rdzv_port}"
    # `$$` is a literal `$` for the macro substitution; bash then expands
    # ${TETHER_RANK0_HOST:=localhost} on each node
    return _Raw(f"$${{{macros.rank0_env}:=localhost}}:{rdzv_port}")


def ddp(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "/",
    h: str | None = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
) -> AppDef:
    """Distributed data parallel: one role of ``nnodes`` replicas, each running torchrun.

    Examples: ``tether run dist.ddp -j 1x2 --script train.py -- --lr 0.1`` (one node, two
    workers); ``tether run dist.ddp -j 2x8 -h gpu.xlarge -m my.trainer``; elastic
    ``-j 1:4x8`` runs on 1 to 4 nodes.

    In the script, :func:`tether.runtime.process_group` joins the default process group
    (gloo on CPU, nccl with CUDA) and tears it down on every rank only after all ranks are
    done, so a rank that finishes first cannot bring a slower peer down::

        from tether.runtime import process_group

        with process_group():
            train()

    Args:
        script_args: Arguments to the script or module.
        script: The Python script to run (relative to the image's working directory).
        m: The Python module to run (``python -m``), instead of ``--script``.
        image: Container image (ignored by local schedulers).
        name: ``{experiment}/{run}``, ``{experiment}/``, ``/{run}`` or ``{run}``; the run name
            is the app's name (default: the script or module name).
        h: A named resource (e.g. gpu.small); wins over --cpu/--gpu/--memMB.
        cpu: CPUs per node (0 or -1: no request, the scheduler's default applies).
        gpu: GPUs per node (0: none).
        memMB: Memory per node in MiB (0 or -1: no request, the scheduler's default applies).
        j: ``[{min_nnodes}:]{nnodes}x{nproc_per_node}``; a range of nodes makes the job
            elastic.
        env: Environment variables, K=V,K2=V2.
        metadata: Metadata for the scheduler, K=V,K2=V2 (the app's ``metadata``).
        max_retries: How many times the scheduler retries the job.
        rdzv_port: Port of the rendezvous store on rank 0's host (multi-node jobs).
        rdzv_backend: Rendezvous backend: c10d (elastic) or static.
        rdzv_conf: More rendezvous settings for torchrun, e.g.
            join_timeout=600,close_timeout=600,timeout=600.
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data,readonly.
        debug: Set PyTorch/NCCL debug environment variables.
        tee: Which worker streams torchrun copies to the console with a rank prefix
            (1 stdout, 2 stderr, 3 both).

    Returns:
        The AppDef.
    """
    if tee not in (0, 1, 2, 3):
        raise ValueError(f"--tee {tee} is not one of 0 (none), 1 (stdout), 2 (stderr), 3 (both)")
    if (script is None) == (m is None):
        raise ValueError("exactly one of --script and -m must be given")
    if rdzv_backend not in RDZV_BACKENDS:
        raise ValueError(
            f"--rdzv_backend {rdzv_backend!r} is not supported; use one of {list(RDZV_BACKENDS)}"
        )
    if not 0 < rdzv_port < 65536:
        raise ValueError(f"--rdzv_port {rdzv_port} is not a port (1-65535)")
    jarg = StructuredJArgument.parse(j)
    nnodes = jarg.nnodes
    nnodes_arg = f"{jarg.min_nnodes}:{nnodes}" if jarg.min_nnodes is not None else str(nnodes)
    if rdzv_backend == "static" and jarg.min_nnodes is not None and jarg.min_nnodes != nnodes:
        raise ValueError(f"-j {j}: elastic node ranges need --rdzv_backend c10d")
    role_name = role_name_of(script, m)
    names = StructuredNameArgument.parse_from(name=name, m=m, script=script)

    role_env = dict(env or {})
    role_env.setdefault("LOGLEVEL", os.environ.get("LOGLEVEL", "WARNING"))
    role_env.setdefault("PYTHONUNBUFFERED", "1")
    role_env[ENV_EXPERIMENT_NAME] = names.experiment_name
    role_env[ENV_RUN_NAME] = names.run_name
    if debug:
        role_env.update(TORCH_DEBUG_FLAGS)

    cmd: list[str] = [
        "python", "-m", "torch.distributed.run",
        "--rdzv_backend", rdzv_backend,
        "--rdzv_endpoint", _rdzv_endpoint(rdzv_backend, nnodes, rdzv_port),
        "--rdzv_id", macros.app_id,
        "--nnodes", nnodes_arg,
        "--nproc_per_node", str(jarg.nproc_per_node),
        "--tee", str(tee),
        "--role", role_name,
    ]
    if rdzv_conf:
        cmd += ["--rdzv_conf", rdzv_conf]
    if rdzv_backend == "static":  # as TorchX: every static rendezvous gets the node rank
        cmd += ["--node_rank", macros.replica_id]
    cmd += [script] if script is not None else ["-m", str(m)]
    cmd += list(script_args)

    return AppDef(
        name=names.run_name,
        metadata=dict(metadata or {}),
        roles=[
            Role(
                name=role_name,
                image=image,
                entrypoint="bash",
                args=["-c", _bash_join(cmd)],
                env=role_env,
                num_replicas=nnodes,
                min_replicas=jarg.min_nnodes,
                max_retries=max_retries,
                resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
                port_map={"c10d": rdzv_port},
                mounts=parse_mounts(mounts) if mounts else [],
                # checked where the role runs on this host (a macro is known only then)
                metadata={ROLE_NEEDS_FILES: [script]} if script and "$" not in script else {},
            )
        ],
    )


def spmd(
    *args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "/",
    h: str = "gpu.small",
    j: str = "1x1",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    mounts: list[str] | None = None,
    debug: bool = False,
    metadata: dict[str, str] | None = None,
) -> AppDef:
    """Single program, multiple data: ``nnodes x nproc_per_node`` copies of one program.

    Like ``dist.ddp``, sized by a named resource: ``-j 2 -h gpu.xlarge`` (8 GPUs per host)
    runs 2 nodes of 8 processes (``-j 2x8``). Use it for DDP, FSDP or any program that calls
    ``torch.distributed.init_process_group``.

    Args:
        args: Arguments to the script or module.
        script: The Python script to run.
        m: The Python module to run, instead of ``--script``.
        image: Container image (ignored by local schedulers).
        name: ``{experiment}/{run}``, ``{experiment}/``, ``/{run}`` or ``{run}``.
        h: The named resource of each host; its GPU count is the default nproc_per_node.
        j: ``[{min_nnodes}:]{nnodes}[x{nproc_per_node}]``.
        env: Environment variables, K=V,K2=V2.
        max_retries: How many times the scheduler retries the job.
        rdzv_port: Port of the rendezvous store on rank 0's host (multi-node jobs).
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data,readonly.
        debug: Set PyTorch/NCCL debug environment variables.
        metadata: Metadata for the scheduler, K=V,K2=V2 (the app's ``metadata``).

    Returns:
        The AppDef.
    """
    return ddp(
        *args,
        script=script,
        m=m,
        image=image,
        name=name,
        h=h,
        j=str(StructuredJArgument.parse_from(h, j)),
        env=env,
        max_retries=max_retries,
        rdzv_port=rdzv_port,
        mounts=mounts,
        debug=debug,
        metadata=metadata,
    )
