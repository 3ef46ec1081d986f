"""Run options of ``slurm`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Final, Literal

from tether.schedulers.slurm.transport import TransportKind
from tether.specs import StructuredOpts

GpuRequest = Literal["gpus", "gres"]
"""The ``gpu_request`` choices."""
GPUS_FLAGS: Final = "gpus"
GPUS_GRES: Final = "gres"
GPU_REQUEST_OPTIONS: tuple[GpuRequest, ...] = typing.get_args(GpuRequest)
ContainerRuntime = Literal["none", "pyxis"]
"""The ``container_runtime`` choices."""
CONTAINER_NONE: Final = "none"
CONTAINER_PYXIS: Final = "pyxis"
CONTAINER_OPTIONS: tuple[ContainerRuntime, ...] = typing.get_args(ContainerRuntime)
MAIL_TYPES = (
    "NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
    "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
)  # fmt: skip


@dataclass
class SlurmOpts(StructuredOpts):
    """Run options of the ``slurm`` scheduler."""

    partition: str | None = None
    """Partition to submit to (--partition; default: the cluster's default partition)."""

    time: str | None = None
    """Time limit (--time), in a Slurm format: MINUTES, HH:MM:SS, D-HH:MM..."""

    account: str | None = None
    """Account to charge (--account)."""

    qos: str | None = None
    """Quality of service (--qos)."""

    constraint: str | None = None
    """Node features the job needs (--constraint), e.g. 'a100&ib'."""

    nodelist: str | None = None
    """Nodes the job must run on (--nodelist); single-role apps only."""

    exclude: str | None = None
    """Nodes the job must not run on (--exclude)."""

    comment: str | None = None
    """A comment shown by squeue (tether appends its own marker to it)."""

    mail_user: str | None = None
    """Where Slurm mails job events (--mail-user)."""

    mail_type: str | None = None
    """Which events Slurm mails (--mail-type), comma separated: BEGIN, END, FAIL, ALL..."""

    job_dir: str | None = None
    """Directory the job runs in and writes its logs to; must be visible from the nodes
    (default: $TETHER_STATE_DIR/slurm, else ~/.local/state/tether/slurm)."""

    workspace_dir: str | None = None
    """Where a --workspace is copied for the nodes (default: <job_dir>/workspaces)."""

    requeue: bool = False
    """Let Slurm requeue the job after a node failure or preemption (--requeue)."""

    exclusive: bool = False
    """Allocate whole nodes (--exclusive)."""

    replicas_per_node: int = 1
    """Replicas of a role per node: 1 gives each its own node (--nodes=N
    --ntasks-per-node=1); K>1 packs K per node; 0 lets Slurm place them (--ntasks=N)."""

    split_streams: bool = False
    """Also keep each replica's stdout and stderr in separate files, so logs can be read by
    stream; the combined log then interleaves the two streams only approximately."""

    gpu_request: GpuRequest = GPUS_FLAGS
    """How Resource.gpu is asked for: gpus (--gpus-per-node/--gpus-per-task) or gres
    (--gres=gpu:N, for clusters without GPU TRES)."""

    container_runtime: ContainerRuntime = CONTAINER_NONE
    """none (Role.image is ignored; no mounts) or pyxis (srun --container-image=Role.image,
    bind mounts as --container-mounts)."""

    sbatch_args: list[str] = field(default_factory=list)
    """Extra sbatch flags, each as one argument ('--reservation=r1'), given to every job
    component."""

    # ---- transport (see tether.schedulers.slurm.transport); the scheduler's parameters
    # (an Airflow connection, Prefect settings) give the defaults, these win for a submit.
    transport: TransportKind | None = None
    """How the cluster is reached: local (Slurm's commands on this machine), ssh (on a login
    node over OpenSSH) or rest (slurmrestd with a JWT). Default: the scheduler's, else local."""

    host: str | None = None
    """transport=ssh: the login node."""

    user: str | None = None
    """transport=ssh: the login user; rest: the Slurm user the JWT belongs to."""

    port: int | None = None
    """transport=ssh: the sshd port (default: ssh's, 22)."""

    identity_file: str | None = None
    """transport=ssh: the private key file."""

    jump_host: str | None = None
    """transport=ssh: a bastion to go through ([user@]host[:port], ssh -J)."""

    known_hosts: str | None = None
    """transport=ssh: the known_hosts file the host key is checked against (default: ssh's)."""

    verify_host_key: bool | None = None
    """transport=ssh: refuse an unknown or changed host key (default: True)."""

    rest_url: str | None = None
    """transport=rest: slurmrestd's base URL, e.g. https://slurm.example:6820."""

    jwt_file: str | None = None
    """transport=rest: a file holding the JWT (default: $SLURM_JWT, else the connection's)."""

    tls_verify: bool | None = None
    """transport=rest: verify slurmrestd's TLS certificate (default: True)."""

    ca_file: str | None = None
    """transport=rest: a CA bundle for slurmrestd's certificate."""

    mount: str | None = None
    """transport=rest or ssh: CLUSTER_DIR=LOCAL_DIR, where this machine mounts the cluster's
    shared filesystem, e.g. /home=/mnt/hpc: rest reaches job_dir through it (logs, delete,
    workspaces); an outputs root under LOCAL_DIR reaches the jobs as CLUSTER_DIR/..."""
