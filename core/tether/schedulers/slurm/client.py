"""The Slurm commands tether runs (sbatch, squeue, scontrol, scancel, sacct), as argv lists.

Every command runs through a :class:`~tether.schedulers.slurm.transport.Transport`: on this
machine (``local``, without a shell, with ``SLURM_CONF`` set when the scheduler was given a
configuration file) or on a login node (``ssh``, every argument quoted). A failure raises
:class:`SlurmCommandError` carrying Slurm's own error text; an unreachable cluster raises
:class:`~tether.schedulers.slurm.transport.SlurmTransportError`.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tether.errors import BackendError
from tether.schedulers.slurm.files import JobFiles, LocalFiles, ShellFiles, parse_probe
from tether.schedulers.slurm.render import RESTARTS_FILE, SlurmRequest
from tether.schedulers.slurm.status import SACCT_FIELDS, SlurmApp, from_sacct
from tether.schedulers.slurm.transport import (
    DEFAULT_TIMEOUT_S,
    LocalTransport,
    Transport,
    TransportCapabilities,
    TransportSettings,
)

if TYPE_CHECKING:
    from tether.schedulers.slurm.workspace import RemoteCopy


class SlurmCommandError(BackendError):
    """A Slurm command failed; the message holds the command and Slurm's error text.

    Attributes:
        argv: The command.
        returncode: Its exit status.
        stderr: What it printed on stderr.
    """

    backend, kind = "slurm", "command"

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"`{argv[0]}` failed (exit {returncode}): {self.stderr or '(no output)'}")


def _squeue_records(argv: Sequence[str], out: str) -> list[dict[str, Any]]:
    """The ``jobs`` of ``squeue --json``'s answer; an answer without them is an error.

    ``squeue --json`` always prints an object with a ``jobs`` array (empty when no job
    matches). Nothing at all, or anything else, is a failed read (a controller that did not
    answer, a truncated pipe), never "no such job": taken as one, a live job would look gone.

    Raises:
        SlurmCommandError: For an empty or unreadable answer.
    """
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        what = "printed nothing" if not out.strip() else f"printed no job list: {out[:200]!r}"
        raise SlurmCommandError(argv, 0, f"squeue {what}")
    jobs: list[dict[str, Any]] = doc["jobs"]
    return jobs


_SQUEUE_PROBE = (
    'd=$1 p=$2 m=$3; shift 3; "$@"; rc=$?; printf \'\\n%s %s\\n\' "$m" "$rc"; '
    f'[ -e "$p" ] && echo D; set -- "$d"/{RESTARTS_FILE}*; [ -f "$1" ] || exit 0; '
    f'cd -- "$d" && wc -c -- {RESTARTS_FILE}*'
)
"""squeue (its argv last), then a frame line, then ``D`` when ``delete``'s marker exists and
the sizes of the restart-count files (``wc``, only when there are any: a job that never
restarted costs no process here besides squeue)."""


class SlurmClient:
    """Runs Slurm's client commands through a transport.

    Args:
        slurm_conf: A ``slurm.conf`` to use (``SLURM_CONF``); default: the usual lookup.
        env: Extra environment for the commands (``local`` only).
        timeout: Seconds a command may take.
        transport: Where the commands run (default: this machine).
    """

    def __init__(
        self,
        slurm_conf: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: Transport | None = None,
    ) -> None:
        self.slurm_conf = slurm_conf
        self.extra_env = dict(env or {})
        self.timeout = timeout
        if transport is None:
            transport = LocalTransport(TransportSettings(slurm_conf=slurm_conf, timeout=timeout))
        elif slurm_conf and not transport.settings.slurm_conf:
            transport.settings = replace(transport.settings, slurm_conf=slurm_conf)
        self.transport = transport
        self._user: str | None = None
        self.files: JobFiles = (
            LocalFiles() if isinstance(transport, LocalTransport) else ShellFiles(transport)
        )

    @property
    def capabilities(self) -> TransportCapabilities:
        """What the transport can do."""
        return self.transport.capabilities

    @property
    def where(self) -> str:
        """The host the commands run on (for messages)."""
        return self.transport.where

    def env(self) -> dict[str, str]:
        """The environment the commands (and the jobs sbatch submits) get (``local``)."""
        env = LocalTransport(self.transport.settings).env()
        env.update(self.extra_env)
        return env

    def run(
        self, argv: Sequence[str], check: bool = True, retry: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs one Slurm command through the transport (the watch hub's ``squeue`` too).

        Args:
            argv: The command line.
            check: Raise :class:`SlurmCommandError` on a non-zero exit.
            retry: Whether it may run again after a dropped connection.

        Returns:
            The finished process.

        Raises:
            SlurmCommandError: When it fails, or the program is missing.
            SlurmTransportError: When the cluster cannot be reached.
        """
        try:
            if isinstance(self.transport, LocalTransport):
                res = subprocess.run(
                    list(argv), env=self.env(), capture_output=True, text=True,
                    errors="surrogateescape", timeout=self.timeout, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            else:
                res = self.transport.run(argv, timeout=self.timeout, retry=retry)
        except FileNotFoundError:
            raise SlurmCommandError(
                argv, 127, f"{argv[0]} not found: install Slurm's client commands (slurm-client)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(argv, 124, f"no answer within {self.timeout:.0f}s") from None
        if res.returncode == 127 and "not found" in res.stderr:
            raise SlurmCommandError(
                argv, 127, f"{argv[0]} not found on {self.where}: install Slurm's client "
                "commands there (slurm-client) or fix the login PATH",
            )  # fmt: skip
        if check and res.returncode != 0:
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        return res

    def submit(self, req: SlurmRequest) -> tuple[str, str]:
        """Writes the script into the job directory and submits it with ``sbatch``.

        Args:
            req: The rendered request.

        Returns:
            (job id, the script's path).

        Raises:
            SlurmCommandError: When Slurm refuses the job (the script is removed).
            ConnectionDropped: When the connection broke during ``sbatch`` (unknown outcome).
        """
        path = self.files.write_new(req.job_dir, f".{req.job_name}-", req.script)
        try:
            job_id = self.sbatch(req.sbatch_args, path)
        except SlurmCommandError:
            self.files.remove(path)
            raise
        final = f"{req.job_dir}/{req.job_name}-{job_id}.sbatch"
        self.files.rename(path, final)
        return job_id, final

    def workspace_copier(self) -> RemoteCopy | None:
        """How a ``dir`` workspace reaches the cluster: None (a local copy) or rsync over ssh."""
        if isinstance(self.transport, LocalTransport):
            return None
        from tether.schedulers.slurm.ssh import SshTransport
        from tether.schedulers.slurm.workspace import rsync_copier

        assert isinstance(self.transport, SshTransport)
        return rsync_copier(self.transport)

    def login_user(self) -> str:
        """The user Slurm's commands run as (this machine's, or the login node's)."""
        if self._user is None:
            if isinstance(self.transport, LocalTransport):
                self._user = getpass.getuser()
            elif self.transport.settings.user:
                self._user = self.transport.settings.user
            else:  # ssh's own choice (~/.ssh/config or the local name): ask
                self._user = self.run(["id", "-un"]).stdout.strip()
        return self._user

    def close(self) -> None:
        """Closes the transport's connection."""
        self.transport.close()

    def sbatch(self, args: Sequence[str], script_path: str) -> str:
        """Submits a script with ``sbatch --parsable``.

        Args:
            args: sbatch's arguments (including ``--parsable``).
            script_path: The script.

        Returns:
            The job id (of the het leader for a heterogeneous job).
        """
        out = self.run(["sbatch", *args, script_path], retry=False).stdout.strip()
        return out.splitlines()[-1].split(";")[0].strip() if out else ""

    @property
    def cluster_key(self) -> str:
        """Names the cluster this client reaches (the watch hub reads each cluster once)."""
        conf = self.slurm_conf or self.extra_env.get("SLURM_CONF")
        if isinstance(self.transport, LocalTransport):
            conf = conf or os.environ.get("SLURM_CONF")
        return f"{self.transport.kind}:{self.where}:{conf or 'default'}"

    def squeue_jobs(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """One ``squeue --json --states=all --jobs=ID,...`` for several jobs (the watch hub's
        read): the records of those Slurm still shows.

        Args:
            ids: Job ids.

        Returns:
            The records.
        """
        argv = ["squeue", "--json", "--states=all", f"--jobs={','.join(ids)}"]
        res = self.run(argv, check=False)
        if res.returncode != 0:
            if "Invalid job id" in res.stderr + res.stdout:  # one id, gone from the queue
                return []
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        return _squeue_records(argv, res.stdout)

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """``squeue --json --states=all``: the job records (finished ones for ``MinJobAge``).

        Args:
            job_id: Only this job (and its het components).
            user: Only this user's jobs.

        Returns:
            The ``jobs`` array (empty when Slurm no longer knows the job).
        """
        argv = self._squeue_argv(job_id, user)
        return self._jobs(argv, self.run(argv, check=False), job_id, user)

    @staticmethod
    def _squeue_argv(job_id: str | None, user: str | None) -> list[str]:
        argv = ["squeue", "--json", "--states=all"]
        if job_id is not None:
            argv.append(f"--jobs={job_id}")
        if user is not None:
            argv.append(f"--user={user}")
        return argv

    @staticmethod
    def _jobs(
        argv: list[str], res: subprocess.CompletedProcess[str], job_id: str | None,
        user: str | None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The records of a finished ``squeue --json`` (see :meth:`squeue`)."""
        if res.returncode != 0:
            if job_id is not None and "Invalid job id" in (res.stderr + res.stdout):
                return []
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        jobs = _squeue_records(argv, res.stdout)
        if job_id is not None:
            jobs = [
                j for j in jobs
                if str(j.get("job_id")) == job_id or str(j.get("het_job_id")) == job_id
            ]  # fmt: skip
        if user is not None:  # Slurm 22.05's squeue --json ignores --user: filter here too
            jobs = [j for j in jobs if j.get("user_name") in (None, user)]
        return jobs

    def squeue_probe(
        self, job_id: str, directory: str, path: str
    ) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
        """:meth:`squeue` of one job and :meth:`JobFiles.probe` of its files, in one round
        trip to the login node over ``ssh`` (``describe`` of a job seen before).

        Args:
            job_id: The job.
            directory: Its log directory.
            path: Its ``delete`` marker.

        Returns:
            (records, file sizes of ``directory`` (over ``ssh`` only its restart-count files,
            all ``describe`` reads of them), whether ``path`` exists).
        """
        if isinstance(self.transport, LocalTransport):
            return (self.squeue(job_id=job_id), *self.files.probe(directory, path))
        argv = self._squeue_argv(job_id, None)
        mark = "TETHER-PROBE-" + secrets.token_hex(6)
        res = self.run(["sh", "-c", _SQUEUE_PROBE, "tether", directory, path, mark, *argv],
                       check=False)  # fmt: skip
        head, sep, tail = res.stdout.rpartition(f"\n{mark} ")
        if not sep:
            raise SlurmCommandError(argv, res.returncode or 1, res.stderr or res.stdout)
        status, _, probe = tail.partition("\n")
        rc = int(status) if status.strip().isdigit() else 1
        done = subprocess.CompletedProcess(argv, rc, head, res.stderr)
        sizes, deleted = parse_probe(probe)
        restarts = {k: n for k, n in sizes.items() if k.startswith(RESTARTS_FILE)}
        return self._jobs(argv, done, job_id, None), restarts, deleted

    def sacct(self, job_id: str | None = None, user: str | None = None) -> str | None:
        """``sacct --parsable2`` of tether's columns, or None when accounting is off.

        Args:
            job_id: Only this job.
            user: Only this user's jobs (all users' jobs otherwise need ``--allusers``).

        Returns:
            sacct's output, or None when Slurm has no accounting storage.
        """
        argv = ["sacct", "--parsable2", "--noheader", "--format=" + ",".join(SACCT_FIELDS)]
        argv += [f"--jobs={job_id}"] if job_id is not None else ["--starttime=now-7days"]
        if user is not None:
            argv.append(f"--user={user}")
        try:
            res = self.run(argv, check=False)
        except SlurmCommandError:  # sacct not installed
            return None
        text = res.stderr + res.stdout
        if res.returncode != 0 or "accounting storage is disabled" in text.lower():
            return None
        return res.stdout

    def accounting(self, job_id: str | None = None, user: str | None = None) -> list[SlurmApp]:
        """tether's apps in :meth:`sacct`'s records (empty without accounting).

        Args:
            job_id: Only this job, or several as ``ID,ID``.
            user: Only this user's jobs.

        Returns:
            The apps.
        """
        return from_sacct(self.sacct(job_id=job_id, user=user) or "")

    def scancel(self, job_id: str) -> None:
        """Cancels a job (every component and step); a job already gone is not an error.

        Args:
            job_id: The job.
        """
        res = self.run(["scancel", job_id], check=False)
        text = res.stderr + res.stdout
        if (
            res.returncode != 0
            and "already completing or completed" not in text
            and ("Invalid job id" not in text)
        ):
            raise SlurmCommandError(["scancel", job_id], res.returncode, text)
