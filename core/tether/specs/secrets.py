"""Masking of secrets: env values whose names look like tokens, passwords or keys.

Dry-runs, describes and log prefixes never print these values; they show ``****`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MASK = "****"

_SECRET_NAME = re.compile(
    r"(TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|PRIVATE|(^|_)KEY$|_KEY_|APIKEY|"
    r"ACCESS_KEY|AUTH|SESSION|COOKIE|SIGNATURE|DSN)",
    re.IGNORECASE,
)


_NOT_SECRET = frozenset({"TETHER_JOB_KEY"})
"""tether's own variables whose names match the pattern but hold no secret."""


def is_secret_name(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret.

    Args:
        name: The variable name, e.g. ``HF_TOKEN`` or ``AWS_SECRET_ACCESS_KEY``.

    Returns:
        True if its value must not be printed.
    """
    return name not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Returns a copy of ``env`` with secret values replaced by ``****``.

    Args:
        env: Environment variables.

    Returns:
        The masked copy.
    """
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def secret_values(envs: Iterable[Mapping[str, str]]) -> list[str]:
    """Collects the values of secret-looking variables of several environments.

    Args:
        envs: Environments to scan.

    Returns:
        The distinct non-empty secret values, longest first.
    """
    vals = {v for env in envs for k, v in env.items() if v and is_secret_name(k)}
    return sorted(vals, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replaces every occurrence of each secret in ``text`` with ``****``.

    Args:
        text: Text to print (a rendered request, a log line).
        secrets: Values to hide.

    Returns:
        The redacted text.
    """
    for s in secrets:
        if s:
            text = text.replace(s, MASK)
    return text


@dataclass(frozen=True)
class SecretRef:
    """A reference to a secret the backend holds: the job gets its value, specs never do.

    Put it in :attr:`~tether.specs.Role.secrets` (environment variable name -> reference).
    Each backend renders it natively and never as plaintext: Kubernetes as an env
    ``valueFrom.secretKeyRef`` of Secret ``name``, key ``key``; AWS Batch as a ``secrets``
    entry whose ``valueFrom`` is ``name`` (a Secrets Manager or SSM Parameter ARN, ``key``
    appended as the JSON key when given); the local backends read it at launch from the file
    ``$TETHER_SECRETS_DIR/name/key`` (default ``~/.config/tether/secrets``), the layout of a
    mounted Kubernetes Secret.

    Attributes:
        name: The secret's name (Kubernetes Secret name, AWS ARN, local directory name).
        key: The key inside the secret (empty: the whole secret, where the backend allows).
    """

    name: str
    key: str = ""

    def __str__(self) -> str:
        return f"secret:{self.name}" + (f"/{self.key}" if self.key else "")
