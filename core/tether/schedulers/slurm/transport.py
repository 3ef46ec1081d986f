"""How the ``slurm`` scheduler reaches its cluster: ``local``, ``ssh`` or ``rest``.

A transport is what runs Slurm's client commands and touches the job directory:

* ``local`` (the default): ``sbatch``, ``squeue``, ``sacct`` and ``scancel`` run on this
  machine, which is a Slurm login or submit host, and the job directory is a local path;
* ``ssh`` (:mod:`.ssh`): the same commands run on a login node through OpenSSH, over one
  multiplexed connection per process; the job directory is read and written there;
* ``rest`` (:mod:`.rest`): Slurm's REST daemon ``slurmrestd`` with a JWT; no command runs
  anywhere, and the job directory is reachable only where this machine mounts the cluster's
  shared filesystem (the ``mount`` setting).

The render is the same for all three: a dry run needs no transport at all. Each transport
states what it can do in one typed place, :class:`TransportCapabilities`.

:class:`TransportSettings` is what the run options and the scheduler's parameters (an Airflow
connection, a Prefect settings object) say about the transport; :func:`settings_from` reads
them and checks them, naming the field, its value and what is allowed.
"""

from __future__ import annotations

import abc
import difflib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Literal, get_args

from tether.errors import BackendError, SpecError

TransportKind = Literal["local", "ssh", "rest"]
TRANSPORTS: tuple[str, ...] = get_args(TransportKind)
DEFAULT_TIMEOUT_S = 60.0


class SlurmTransportError(BackendError):
    """The cluster cannot be reached through the transport; says which, where and what to fix.

    Attributes:
        transport: ``ssh`` or ``rest`` (or ``local``).
        where: The host (``user@host:port``) or URL.
        hint: What to fix.
    """

    backend, kind = "slurm", "connection"

    def __init__(self, transport: str, where: str, problem: str, hint: str = "") -> None:
        self.transport = transport
        self.where = where
        self.hint = hint
        text = f"slurm transport {transport} to {where}: {problem}"
        super().__init__(text + (f"; {hint}" if hint else ""))


class SlurmTransportConfigError(SpecError):
    """Transport settings that cannot work; the message names the field, value and what is
    allowed."""


class ConnectionDropped(SlurmTransportError):
    """The connection broke while a command ran: whether the command took effect is unknown."""


@dataclass(frozen=True)
class TransportCapabilities:
    """What a transport can do (read by the scheduler; never guessed from the name).

    Attributes:
        runs_commands: It runs Slurm's client commands (``run``: the watch hub's squeue).
        reads_files: It reads and writes the job directory (logs, exit codes, delete).
        copies_workspaces: It copies a ``dir`` workspace to the cluster.
        accounting: It can ask Slurm's accounting (``sacct``) about old jobs.
    """

    runs_commands: bool
    reads_files: bool
    copies_workspaces: bool
    accounting: bool


@dataclass(frozen=True)
class TransportSettings:
    """Where and how the cluster is reached (no secret value is kept here: the JWT itself
    is read from its source when a request is made).

    Attributes:
        transport: ``local``, ``ssh`` or ``rest``.
        slurm_conf: ``SLURM_CONF`` for the commands (``local``, ``ssh``).
        host: ``ssh``: the login node.
        user: ``ssh``: the login user; ``rest``: the Slurm user the token belongs to.
        port: ``ssh``: the sshd port.
        identity_file: ``ssh``: the private key.
        jump_host: ``ssh``: a bastion (``[user@]host[:port]``, ssh's ``-J``).
        known_hosts: ``ssh``: a known_hosts file (default: ssh's own).
        verify_host_key: ``ssh``: refuse unknown host keys (on by default).
        rest_url: ``rest``: slurmrestd's base URL.
        jwt_file: ``rest``: a file holding the JWT (else ``SLURM_JWT``, else the secret).
        tls_verify: ``rest``: verify the server's certificate (on by default).
        ca_file: ``rest``: CA bundle for the server's certificate.
        mount: ``CLUSTER_DIR=LOCAL_DIR``, where this machine mounts a directory of the
            cluster's shared filesystem: ``rest`` reaches ``job_dir`` through it (logs, delete,
            workspaces); ``ssh`` and ``rest`` give jobs an outputs root under ``LOCAL_DIR`` as
            the cluster sees it (:mod:`.outputs`).
        timeout: Seconds one call may take.
    """

    transport: str = "local"
    slurm_conf: str | None = None
    host: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    jump_host: str | None = None
    known_hosts: str | None = None
    verify_host_key: bool = True
    rest_url: str | None = None
    jwt_file: str | None = None
    tls_verify: bool = True
    ca_file: str | None = None
    mount: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S

    def overlay(self, values: Mapping[str, Any]) -> TransportSettings:
        """These settings with the non-None ``values`` (run options) applied on top."""
        names = {f.name for f in fields(self)}
        changes = {k: v for k, v in values.items() if k in names and v is not None}
        return replace(self, **changes) if changes else self

    def check(self) -> None:
        """Checks the settings against each other.

        Raises:
            SlurmTransportConfigError: Naming each bad field, its value and what is allowed.
        """
        errs: list[str] = []
        if self.transport not in TRANSPORTS:
            close = difflib.get_close_matches(str(self.transport), TRANSPORTS, n=1, cutoff=0.5)
            errs.append(
                f"transport={self.transport!r} is not allowed"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; allowed: {', '.join(TRANSPORTS)}"
            )
        if self.transport == "ssh" and not self.host:
            errs.append("transport='ssh' needs host (the login node), e.g. host=login.cluster")
        if self.transport == "rest":
            if not self.rest_url:
                errs.append("transport='rest' needs rest_url, e.g. https://slurm.example:6820")
            elif not self.rest_url.startswith(("http://", "https://")):
                errs.append(f"rest_url={self.rest_url!r} must start with http:// or https://")
        if self.mount is not None and self.mount_dirs() is None:
            errs.append(
                f"mount={self.mount!r} must be CLUSTER_DIR=LOCAL_DIR, both absolute, e.g. "
                "/home=/mnt/hpc-home"
            )
        if self.port is not None and not 0 < int(self.port) < 65536:
            errs.append(f"port={self.port} must be between 1 and 65535")
        if self.host and (self.host.startswith("-") or any(c.isspace() for c in self.host)):
            errs.append(f"host={self.host!r} is not a host name")
        if self.user and (self.user.startswith("-") or any(c.isspace() for c in self.user)):
            errs.append(f"user={self.user!r} is not a user name")
        if self.jump_host and self.jump_host.startswith("-"):
            errs.append(f"jump_host={self.jump_host!r} is not a host")
        if errs:
            raise SlurmTransportConfigError(
                "invalid slurm transport settings:\n  - " + "\n  - ".join(errs)
            )


    def mount_dirs(self) -> tuple[str, str] | None:
        """(cluster directory, local directory) of ``mount``, or None when unset or malformed."""
        cluster, eq, here = (self.mount or "").partition("=")
        if not eq or not cluster.startswith("/") or not here.startswith("/"):
            return None
        return cluster, here


SETTING_FIELDS = tuple(f.name for f in fields(TransportSettings))


ENV_PREFIX = "TETHER_SLURM_"
"""``TETHER_SLURM_<SETTING>`` variables (``TETHER_SLURM_TRANSPORT=ssh``,
``TETHER_SLURM_HOST``...) give defaults below the scheduler's parameters, so a later
``tether status`` or ``tether log`` in another shell reaches the same cluster."""
_TRUE = ("1", "true", "yes", "on")


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings ``TETHER_SLURM_*`` variables give (typed; empty ones skipped).

    Args:
        env: The environment (default: this process's).

    Returns:
        Setting name to value.
    """
    source = os.environ if env is None else env
    out: dict[str, Any] = {}
    for f in fields(TransportSettings):
        raw = source.get(ENV_PREFIX + f.name.upper(), "")
        if not raw:
            continue
        kind = str(f.type)
        try:
            if "bool" in kind:
                out[f.name] = raw.strip().lower() in _TRUE
            elif "int" in kind:
                out[f.name] = int(raw)
            elif "float" in kind:
                out[f.name] = float(raw)
            else:
                out[f.name] = raw
        except ValueError:
            raise SlurmTransportConfigError(
                f"{ENV_PREFIX}{f.name.upper()}={raw!r} is not a number"
            ) from None
    return out


def settings_from(params: Mapping[str, Any]) -> TransportSettings:
    """Settings from scheduler parameters over ``TETHER_SLURM_*`` variables (unknown keys are
    not settings and are skipped; None values leave the default).

    Args:
        params: Keyword arguments of :func:`~tether.schedulers.slurm.scheduler.create_scheduler`.

    Returns:
        The checked settings.
    """
    s = TransportSettings().overlay(settings_from_env()).overlay(params)
    s.check()
    return s


class Transport(abc.ABC):
    """Runs Slurm's client commands somewhere (``local`` and ``ssh``).

    Args:
        settings: The settings.
    """

    kind: ClassVar[str] = "local"
    capabilities: ClassVar[TransportCapabilities]

    def __init__(self, settings: TransportSettings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """The host (or URL) this transport reaches, for messages."""

    @abc.abstractmethod
    def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout: float | None = None,
        retry: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Runs one command (without a shell on this machine) and returns it, finished.

        Args:
            argv: The command line.
            input: Text for its stdin.
            timeout: Seconds (default: the settings' timeout).
            retry: Whether the command may run again after a dropped connection (False for
                ``sbatch``: a drop then raises :class:`ConnectionDropped`).

        Returns:
            The finished process; a non-zero exit is not an error here.

        Raises:
            SlurmTransportError: When the cluster cannot be reached.
            FileNotFoundError: When the program does not exist there.
        """

    def close(self) -> None:  # noqa: B027 - most transports hold nothing
        """Releases connections (safe to call more than once)."""


class LocalTransport(Transport):
    """Runs the commands on this machine, as tether always did."""

    kind: ClassVar[str] = "local"
    capabilities: ClassVar[TransportCapabilities] = TransportCapabilities(
        runs_commands=True, reads_files=True, copies_workspaces=True, accounting=True
    )

    @property
    def where(self) -> str:
        """``localhost``."""
        return "localhost"

    def env(self) -> dict[str, str]:
        """The environment the commands (and the jobs sbatch submits) get."""
        env = dict(os.environ)
        if self.settings.slurm_conf:
            env["SLURM_CONF"] = self.settings.slurm_conf
        return env

    def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout: float | None = None,
        retry: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` here (see :meth:`Transport.run`)."""
        return subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True,
            errors="surrogateescape", input=input, timeout=timeout or self.settings.timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip

