"""Which Slurm cluster a Prefect flow's tether jobs go to, and how it is reached.

:class:`SlurmConnection` is a Prefect Block (save it once, load it by name in flows) holding
the ``slurm`` scheduler's transport (see ``docs/slurm.md``): ``local`` (the worker is a Slurm
submit host), ``ssh`` (host, port, user, a key given as a path or as a secret, the login
node's host key, a jump host) or ``rest`` (slurmrestd's URL, the Slurm user, the JWT as a
secret). :meth:`SlurmConnection.from_env` reads the same from ``TETHER_SLURM_*`` variables,
for workers configured by their environment. Secrets are ``SecretStr``: a block's repr, a
flow's logs and tether's dry runs never show them; a key given inline is written to a private
0600 file, whose path is what tether gets::

    conn = SlurmConnection(transport="ssh", host="login.hpc", user="alice",
                           private_key=key_text, host_key="ssh-ed25519 AAAA...",
                           job_dir="/home/alice/tether-jobs")
    with get_runner(**conn.scheduler_params()) as runner:  # doctest: +SKIP
        runner.run(app, "slurm", conn.run_defaults())

Component tasks (``component_task(..., scheduler="slurm")``) make their own Runner, and a
task that re-attaches after a crash does so in a new process: they reach the cluster through
the worker's environment, the variables :meth:`SlurmConnection.environment` gives.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from prefect.blocks.core import Block
from pydantic import SecretStr

ENV_PREFIX = "TETHER_SLURM_"
_TRUE = ("1", "true", "yes", "on")


def _private_file(kind: str, content: str) -> str:
    digest = hashlib.sha256(content.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"tether-{kind}-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / digest
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(content if content.endswith("\n") else content + "\n")
    return str(path)


class SlurmConnection(Block):
    """How tether reaches a Slurm cluster from a Prefect worker (see the module docs)."""

    _block_type_name = "tether Slurm connection"

    transport: Literal["local", "ssh", "rest"] = "local"
    slurm_conf: str | None = None
    host: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    private_key: SecretStr | None = None
    host_key: str | None = None
    known_hosts: str | None = None
    verify_host_key: bool = True
    jump_host: str | None = None
    rest_url: str | None = None
    jwt: SecretStr | None = None
    jwt_file: str | None = None
    tls_verify: bool = True
    ca_file: str | None = None
    mount: str | None = None
    job_dir: str | None = None
    partition: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SlurmConnection:
        """The connection ``TETHER_SLURM_<FIELD>`` variables describe (``TETHER_SLURM_HOST``...).

        Args:
            env: The environment (default: this process's).

        Returns:
            The connection.
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = source.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            if name in ("verify_host_key", "tls_verify"):
                values[name] = raw.strip().lower() in _TRUE
            else:
                values[name] = raw
        return cls(**values)

    def scheduler_params(self) -> dict[str, Any]:
        """Keyword arguments for ``tether.runner.get_runner`` (the secret JWT included: pass
        them on, never print them)."""
        params: dict[str, Any] = {"transport": self.transport}
        for name in ("slurm_conf", "host", "port", "user", "identity_file", "known_hosts",
                     "jump_host", "rest_url", "jwt_file", "ca_file", "mount"):  # fmt: skip
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        if self.private_key is not None:
            params["identity_file"] = _private_file("sshkey", self.private_key.get_secret_value())
        if self.host_key and self.host:
            where = self.host if not self.port else f"[{self.host}]:{self.port}"
            params["known_hosts"] = _private_file("knownhosts", f"{where} {self.host_key}")
        if not self.verify_host_key:
            params["verify_host_key"] = False
        if not self.tls_verify:
            params["tls_verify"] = False
        if self.jwt is not None:
            params["jwt"] = self.jwt.get_secret_value()
        return params

    def environment(self) -> dict[str, str]:
        """``TETHER_SLURM_*`` variables that make every tether call of a process reach this
        cluster: component tasks (``component_task(..., scheduler="slurm")``), their
        re-attach after a crash, ``tether status``. Set them in the worker's environment (a
        work pool's ``env``, a deployment's job variables). Secrets become paths of private
        0600 files (the key as ``TETHER_SLURM_IDENTITY_FILE``, the JWT as
        ``TETHER_SLURM_JWT_FILE``), never values.

        Returns:
            Variable name to value.
        """
        params = self.scheduler_params()
        jwt = params.pop("jwt", None)
        if jwt is not None and "jwt_file" not in params:
            params["jwt_file"] = _private_file("jwt", jwt)
        return {ENV_PREFIX + k.upper(): str(v) for k, v in params.items()}

    def run_defaults(self) -> dict[str, Any]:
        """Run options this connection sets when a task's own ``cfg`` does not."""
        return {k: v for k, v in (("job_dir", self.job_dir), ("partition", self.partition)) if v}
