"""Local resolution of :class:`~tether.specs.SecretRef` (``Role.secrets``) for ``local_cwd``.

A reference ``SecretRef(name, key)`` reads the file ``$TETHER_SECRETS_DIR/<name>/<key>``
(default ``~/.config/tether/secrets``; the layout of a mounted Kubernetes Secret); with an
empty key, the file ``<dir>/<name>``. The supervisor resolves references when it starts a
replica and passes the values in the replica's environment only: they are never written to
the app's record, and failure messages mask them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tether.errors import SpecError
from tether.specs import SecretRef

SECRETS_DIR_ENV = "TETHER_SECRETS_DIR"
"""Environment variable naming the directory of local secrets."""


def secrets_dir() -> Path:
    """``$TETHER_SECRETS_DIR`` or ``~/.config/tether/secrets``."""
    env = os.environ.get(SECRETS_DIR_ENV)
    return Path(env).expanduser() if env else Path("~/.config/tether/secrets").expanduser()


def _part(what: str, value: str, ref: SecretRef) -> str:
    if value in (".", "..") or "/" in value or "\0" in value:
        raise SpecError(
            f"secret {what} {value!r} of {ref} is not a plain file name (no '/', '.' or '..')"
        )
    return value


def secret_path(ref: SecretRef) -> Path:
    """The file holding the value of ``ref``.

    Args:
        ref: The reference.

    Returns:
        The path (not checked).

    Raises:
        SpecError: When the name or key would leave the secrets directory.
    """
    path = secrets_dir() / _part("name", ref.name, ref)
    return path / _part("key", ref.key, ref) if ref.key else path


def check_secrets(role_name: str, secrets: Mapping[str, SecretRef]) -> None:
    """Checks (at dry-run) that every referenced secret file exists; reads no value.

    Args:
        role_name: The role, for messages.
        secrets: The role's ``secrets``.

    Raises:
        SpecError: Naming the variable, the reference and the missing file.
    """
    for var, ref in secrets.items():
        path = secret_path(ref)
        if not path.is_file():
            raise SpecError(
                f"role {role_name!r}: secrets[{var!r}] = {ref}: no file {str(path)!r} "
                f"(local_cwd reads secrets from ${SECRETS_DIR_ENV}/<name>/<key>)"
            )


def resolve_secrets(secrets: Mapping[str, SecretRef]) -> dict[str, str]:
    """Reads the values of a role's secrets (at launch, in the supervisor).

    Args:
        secrets: Environment variable -> reference.

    Returns:
        Environment variable -> value (one trailing newline stripped, as files often end).

    Raises:
        OSError: When a file cannot be read (the message names the file, not the value).
    """
    out: dict[str, str] = {}
    for var, ref in secrets.items():
        data = secret_path(ref).read_bytes().decode("utf-8", errors="replace")
        out[var] = data[:-1] if data.endswith("\n") else data
    return out


def known_secret_values(secrets: Mapping[str, SecretRef]) -> list[str]:
    """The values of the secrets that can be read now (for masking logs); unreadable skipped.

    Args:
        secrets: The role's ``secrets``.

    Returns:
        The values, longest first.
    """
    out: list[str] = []
    for var, ref in secrets.items():
        try:
            out.extend(resolve_secrets({var: ref}).values())
        except (OSError, ValueError):
            continue
    return sorted((v for v in out if v), key=len, reverse=True)
