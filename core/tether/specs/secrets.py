"""The one secret policy of tether: what counts as a secret and how it is masked.

A value is secret when

* its environment variable (or ``--flag``) name looks like one: ``*TOKEN*``, ``*SECRET*``,
  ``KEY`` as a word (``API_KEY``, ``KEY_ID``, ``APIKEY``), ``*PASSWORD*``, ``*_PASS*``,
  ``*PWD*``, ``*_PAT``, ``*CREDENTIAL*``, ``*AUTH*``, ``*DSN*``... (:func:`is_secret_name`);
* it is the password of a URL (``scheme://user:password@host``, e.g. ``DATABASE_URL``);
* it was registered as secret: the value a backend resolved for a
  :class:`SecretRef` of ``Role.secrets`` (only the process that resolves it knows it).

Every surface that prints app data (dry-runs, ``describe``, status and failure messages with
stderr excerpts, log fan-in) masks with :func:`mask_text` / :func:`mask_args` /
:func:`mask_env`, which show ``****`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MASK = "****"

_SECRET_NAME = re.compile(
    r"(TOKEN|PASSWORD|PASSWD|PASSPHRASE|_PASS|^PASS$|PWD|_PAT$|^PAT$|SECRET|CREDENTIAL|"
    r"PRIVATE|(^|_)KEYS?(_|$)|KEY$|AUTH|SESSION|COOKIE|SIGNATURE|DSN)",
    re.IGNORECASE,
)
# Linear time on any input (log lines can be megabytes of one character): a name or scheme
# starts only where a word starts (look-behind) and is taken whole (possessive ``*+``), so no
# start position rescans the same run of characters.
_URL_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<pre>[A-Za-z][A-Za-z0-9+.-]*+://[^\s/:@]*+:)(?P<pw>[^\s/@]++)@"
)
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<name>(?:--?)?[A-Za-z_][A-Za-z0-9_.-]*+)=(?P<value>[^\s'\"]++)"
)


_NOT_SECRET = frozenset({"TETHER_JOB_KEY", "PWD", "OLDPWD", "TETHER_LOCAL_APPS"})
"""Variables whose names match the pattern but hold no secret (``PWD``: the shell's cwd)."""


def is_secret_name(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret.

    Args:
        name: The variable name, e.g. ``HF_TOKEN`` or ``AWS_SECRET_ACCESS_KEY``.

    Returns:
        True if its value must not be printed.
    """
    return name not in _NOT_SECRET and bool(_SECRET_NAME.search(name.replace("-", "_")))


def url_passwords(text: str) -> list[str]:
    """The passwords of the URLs in ``text`` (``scheme://user:password@host``).

    Args:
        text: Any text.

    Returns:
        The passwords, in order.
    """
    return [m.group("pw") for m in _URL_PASSWORD.finditer(text)]


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Masks every secret in free text: known values, URL passwords, ``NAME=value`` pairs.

    Args:
        text: Text about to be shown (a message, an stderr excerpt, a rendered request).
        secrets: Values known to be secret (see :func:`secret_values`).

    Returns:
        The text with ``****`` in place of each secret.
    """
    text = redact(text, sorted({s for s in secrets if s}, key=len, reverse=True))
    if "://" in text:  # cheap checks first: most log lines have neither
        text = _URL_PASSWORD.sub(lambda m: m.group("pre") + MASK + "@", text)
    if "=" not in text:
        return text
    return _ASSIGNMENT.sub(
        lambda m: (
            f"{m.group('name')}={MASK}"
            if is_secret_name(m.group("name").lstrip("-")) and m.group("value") != MASK
            else m.group(0)
        ),
        text,
    )


def mask_args(args: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """Masks secrets in an argument list: ``--password X`` / ``--token=X`` and free text.

    Args:
        args: The arguments.
        secrets: Values known to be secret.

    Returns:
        The masked copy.
    """
    known = list(secrets)
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next and a:
            out.append(MASK)
            hide_next = False
            continue
        hide_next = a.startswith("-") and "=" not in a and is_secret_name(a.lstrip("-"))
        out.append(mask_text(a, known))
    return out


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Returns a copy of ``env`` with secret values replaced by ``****``.

    Args:
        env: Environment variables.

    Returns:
        The masked copy.
    """
    return {k: (MASK if is_secret_name(k) and v else mask_text(v)) for k, v in env.items()}


def secret_values(envs: Iterable[Mapping[str, str]]) -> list[str]:
    """Collects the values of secret-looking variables of several environments.

    Args:
        envs: Environments to scan.

    Returns:
        The distinct non-empty secret values (and URL passwords), longest first.
    """
    vals: set[str] = set()
    for env in envs:
        for k, v in env.items():
            if v and is_secret_name(k):
                vals.add(v)
            elif v:
                vals.update(url_passwords(v))
    return sorted(vals, key=len, reverse=True)


def arg_secrets(args: Iterable[str]) -> list[str]:
    """The secret values in an argument list (see :func:`mask_args`).

    Args:
        args: The arguments.

    Returns:
        Values following a secret-named flag, ``NAME=value`` values of secret names and URL
        passwords.
    """
    out: list[str] = []
    take_next = False
    for a in args:
        if take_next and a:
            out.append(a)
        take_next = a.startswith("-") and "=" not in a and is_secret_name(a.lstrip("-"))
        out.extend(url_passwords(a))
        out.extend(
            m.group("value")
            for m in _ASSIGNMENT.finditer(a)
            if is_secret_name(m.group("name").lstrip("-"))
        )
    return out


def app_secret_values(roles: Iterable[object]) -> list[str]:
    """Every value an app's roles mark as secret, in env and args (for :func:`mask_text`).

    Args:
        roles: The app's roles (:class:`~tether.specs.Role`).

    Returns:
        The distinct values, longest first.
    """
    vals: set[str] = set()
    for role in roles:
        vals.update(secret_values([getattr(role, "env", {})]))
        vals.update(arg_secrets(getattr(role, "args", [])))
    return sorted((v for v in vals if v and v != MASK), key=len, reverse=True)


def mask_value(name: str, value: Any, secrets: Iterable[str] = ()) -> Any:
    """Masks a named value by the same policy: a component parameter, an operator field.

    A string of a secret-looking ``name`` becomes ``****``; other strings are masked as free
    text; a list of strings as an argument list (:func:`mask_args`); a mapping key by key.
    Numbers and other values are kept (``max_tokens=5`` is no secret).

    Args:
        name: The value's name (a parameter or field name).
        value: The value (JSON-like data).
        secrets: Values known to be secret.

    Returns:
        The masked copy.
    """
    known = list(secrets)
    if isinstance(value, Mapping):
        return {k: mask_value(str(k), v, known) for k, v in value.items()}
    if isinstance(value, str):
        return MASK if value and is_secret_name(name) else mask_text(value, known)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value) and not is_secret_name(name):
            return mask_args(value, known)
        return [mask_value(name, v, known) for v in value]
    return value


def value_secrets(name: str, value: Any) -> list[str]:
    """The secret strings inside a named value (see :func:`mask_value`), to redact elsewhere.

    Args:
        name: The value's name.
        value: The value.

    Returns:
        The secret strings found.
    """
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in value_secrets(str(k), v)]
    if isinstance(value, (list, tuple)):
        strs = [v for v in value if isinstance(v, str)]
        found = [v for v in strs if v] if is_secret_name(name) else arg_secrets(strs)
        return found + [s for v in value if not isinstance(v, str)
                        for s in value_secrets(name, v)]
    if isinstance(value, str) and value:
        return [value] if is_secret_name(name) else arg_secrets([value])
    return []


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
