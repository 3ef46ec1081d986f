"""The client of each transport, behind one interface (:class:`SlurmApi`).

:func:`make_client` turns :class:`~.transport.TransportSettings` into the client the scheduler
talks to: a :class:`~.client.SlurmClient` over a command transport (``local``, ``ssh``) or a
:class:`~.rest.RestClient` (``rest``). :func:`request_text` is what a dry run shows for each:
the sbatch command and script, and for ``rest`` also the JSON job description it would post.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tether.schedulers.slurm.files import JobFiles
from tether.schedulers.slurm.render import SlurmRequest, format_request
from tether.schedulers.slurm.transport import (
    LocalTransport,
    Transport,
    TransportCapabilities,
    TransportSettings,
)

if TYPE_CHECKING:
    from tether.schedulers.slurm.status import SlurmApp
    from tether.schedulers.slurm.workspace import RemoteCopy


class SlurmApi(Protocol):
    """What the scheduler needs of a cluster, whichever the transport."""

    @property
    def capabilities(self) -> TransportCapabilities:
        """What the transport can do."""
        ...

    @property
    def where(self) -> str:
        """The host or URL, for messages."""
        ...

    @property
    def files(self) -> JobFiles:
        """The job directory through the transport."""
        ...

    def run(
        self, argv: Sequence[str], check: bool = True, retry: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs one Slurm command (``local``, ``ssh``; the watch hub's squeue)."""
        ...

    def submit(self, req: SlurmRequest) -> tuple[str, str]:
        """Submits the request; returns (job id, where the script is kept, or '')."""
        ...

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """Job records in ``squeue --json`` form (see :func:`.status.from_squeue`)."""
        ...

    def squeue_probe(
        self, job_id: str, directory: str, path: str
    ) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
        """``squeue`` of one job and ``files.probe(directory, path)`` (one round trip where
        the transport allows)."""
        ...

    @property
    def cluster_key(self) -> str:
        """Names the cluster this client reaches (transport, host or URL, configuration)."""
        ...

    def squeue_jobs(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of several jobs in one read (the watch hub's)."""
        ...

    def accounting(self, job_id: str | None = None, user: str | None = None) -> list[SlurmApp]:
        """Slurm's accounting records of tether's jobs (``sacct``, or slurmrestd's
        ``slurmdb`` API); empty without accounting."""
        ...

    def scancel(self, job_id: str) -> None:
        """Cancels a job (idempotent)."""
        ...

    def workspace_copier(self) -> RemoteCopy | None:
        """How a ``dir`` workspace reaches the cluster (None: copied on this machine)."""
        ...

    def login_user(self) -> str:
        """The Slurm user jobs are submitted as (``list`` shows this user's jobs)."""
        ...

    def close(self) -> None:
        """Releases connections."""
        ...


def make_transport(settings: TransportSettings) -> Transport:
    """The command transport of ``local`` or ``ssh`` settings.

    Args:
        settings: Checked settings.

    Returns:
        A transport (no connection is made yet).
    """
    if settings.transport == "ssh":
        from tether.schedulers.slurm.ssh import SshTransport

        return SshTransport(settings)
    return LocalTransport(settings)


def make_client(settings: TransportSettings, jwt: str | None = None) -> SlurmApi:
    """The client for ``settings`` (nothing is contacted until the first call).

    Args:
        settings: Checked transport settings.
        jwt: ``rest``: the token from a connection's secret.

    Returns:
        The client.
    """
    if settings.transport == "rest":
        from tether.schedulers.slurm.rest import RestClient

        return RestClient(settings, jwt=jwt)
    from tether.schedulers.slurm.client import SlurmClient

    transport = make_transport(settings)
    return SlurmClient(slurm_conf=settings.slurm_conf, timeout=settings.timeout,
                       transport=transport)  # fmt: skip


def request_text(req: SlurmRequest, transport: str) -> str:
    """The dry run's text: the sbatch command and script; for ``rest`` the JSON too.

    Args:
        req: The rendered request.
        transport: The transport's kind.

    Returns:
        Text (no secret: the JWT is never part of a request).
    """
    text = format_request(req)
    if transport != "rest":
        return text
    from tether.schedulers.slurm.rest_job import job_description

    shown = {**job_description(req), "script": "<the batch script above>"}
    body = json.dumps(shown, indent=2, sort_keys=True)
    return f"{text}\n# slurmrestd: POST /slurm/<version>/job/submit\n{body}\n"
