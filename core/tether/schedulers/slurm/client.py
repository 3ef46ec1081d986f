"""The Slurm commands tether runs (sbatch, squeue, scontrol, scancel, sacct), as argv lists.

Every command runs without a shell, with ``SLURM_CONF`` set when the scheduler was given a
configuration file, and a failure raises :class:`SlurmCommandError` carrying Slurm's own
error text.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import BackendError
from tether.schedulers.slurm.status import SACCT_FIELDS

DEFAULT_TIMEOUT_S = 60.0


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


class SlurmClient:
    """Runs Slurm's client commands.

    Args:
        slurm_conf: A ``slurm.conf`` to use (``SLURM_CONF``); default: the usual lookup.
        env: Extra environment for the commands.
        timeout: Seconds a command may take.
    """

    def __init__(
        self,
        slurm_conf: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.slurm_conf = slurm_conf
        self.extra_env = dict(env or {})
        self.timeout = timeout

    def env(self) -> dict[str, str]:
        """The environment the commands (and the jobs sbatch submits) get."""
        env = {**os.environ, **self.extra_env}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs one command.

        Args:
            argv: The command line.
            check: Raise :class:`SlurmCommandError` on a non-zero exit.

        Returns:
            The finished process.

        Raises:
            SlurmCommandError: When it fails, or the program is missing.
        """
        try:
            res = subprocess.run(
                list(argv), env=self.env(), capture_output=True, text=True,
                timeout=self.timeout, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except FileNotFoundError:
            raise SlurmCommandError(
                argv, 127, f"{argv[0]} not found: install Slurm's client commands (slurm-client)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(argv, 124, f"no answer within {self.timeout:.0f}s") from None
        if check and res.returncode != 0:
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        return res

    def sbatch(self, args: Sequence[str], script_path: str) -> str:
        """Submits a script with ``sbatch --parsable``.

        Args:
            args: sbatch's arguments (including ``--parsable``).
            script_path: The script.

        Returns:
            The job id (of the het leader for a heterogeneous job).
        """
        out = self.run(["sbatch", *args, script_path]).stdout.strip()
        return out.splitlines()[-1].split(";")[0].strip() if out else ""

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """``squeue --json --states=all``: the job records (finished ones for ``MinJobAge``).

        Args:
            job_id: Only this job (and its het components).
            user: Only this user's jobs.

        Returns:
            The ``jobs`` array (empty when Slurm no longer knows the job).
        """
        argv = ["squeue", "--json", "--states=all"]
        if job_id is not None:
            argv.append(f"--jobs={job_id}")
        if user is not None:
            argv.append(f"--user={user}")
        res = self.run(argv, check=False)
        if res.returncode != 0:
            if job_id is not None and "Invalid job id" in (res.stderr + res.stdout):
                return []
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        jobs: list[dict[str, Any]] = json.loads(res.stdout or "{}").get("jobs") or []
        if job_id is not None:
            jobs = [
                j for j in jobs
                if str(j.get("job_id")) == job_id or str(j.get("het_job_id")) == job_id
            ]  # fmt: skip
        return jobs

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
