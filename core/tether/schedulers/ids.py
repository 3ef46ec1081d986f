"""Ids and names of submissions: the one place every backend gets a new job's id from.

A submission's id is ``{base}-{suffix}``: ``base`` is the app's name made acceptable to the
backend (its characters, case and length), ``suffix`` fresh random lowercase letters and
digits from the OS's random source. Each backend declares its constraints once as an
:class:`AppIdRule` (``local`` uses :data:`DEFAULT_RULE`; ``kubernetes`` a DNS-1035 label of at
most 39 characters; ``aws_batch`` keeps case and ``_``...) and calls :func:`make_app_id`.

TorchX's helpers keep their names and behaviour: :func:`make_unique`, :func:`random_id` and
:func:`random_uint64` (ids that are valid Kubernetes names: lowercase consonants and digits,
a letter first).

This module imports nothing heavy (it is on the CLI's start): no ``secrets``, ``random`` or SDK.
"""

from __future__ import annotations

import os
import re
from typing import Final

ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
"""The characters of a random suffix."""

_FIRST = "bcdfghjklmnpqrstvwxz"
"""The first character of a :func:`random_id`: consonants only, so no id spells a word."""
_REST = _FIRST + "0123456789"
"""Any later character of a :func:`random_id`."""


def random_string(n: int, alphabet: str = ID_ALPHABET) -> str:
    """``n`` characters of ``alphabet`` from the OS's random source, each equally likely.

    Args:
        n: How many characters.
        alphabet: The characters to draw from (at most 256).

    Returns:
        The string.
    """
    size = len(alphabet)
    limit = 256 - 256 % size  # bytes below a multiple of the alphabet's size: no bias
    out: list[str] = []
    while len(out) < n:
        out += [alphabet[b % size] for b in os.urandom(2 * n) if b < limit]
    return "".join(out[:n])


def random_uint64() -> int:
    """A random unsigned 64-bit integer from the OS's random source (TorchX's name).

    Returns:
        An integer in ``[0, 2**64)``.
    """
    return int.from_bytes(os.urandom(8), "big")


def random_id() -> str:
    """A random id that is a valid Kubernetes name (TorchX's name and behaviour).

    The 64 bits of :func:`random_uint64` written with lowercase consonants and digits, a
    consonant first: at most 14 characters, never a word.

    Returns:
        The id, e.g. ``kqz9d3xw7b2hnt``.
    """
    v = random_uint64()
    out = [_FIRST[v % len(_FIRST)]]
    v //= len(_FIRST)
    while v:
        out.append(_REST[v % len(_REST)])
        v //= len(_REST)
    return "".join(out)


def make_unique(name: str, string_length: int = 0) -> str:
    """``name`` with a random suffix appended (TorchX's name and behaviour).

    Args:
        name: Any name.
        string_length: The suffix's length; ``0`` for a :func:`random_id`.

    Returns:
        ``{name}-{suffix}``, where the suffix starts with a consonant and holds lowercase
        consonants and digits.
    """
    if string_length <= 0:
        return f"{name}-{random_id()}"
    suffix = random_string(1, _FIRST) + random_string(string_length - 1, _REST)
    return f"{name}-{suffix}"


class AppIdRule:
    """How one backend turns an app's name into a submission id ``{base}-{suffix}``.

    A plain class, not a dataclass: making a frozen dataclass generates and compiles six
    methods when this module is imported, which every ``tether`` command that submits or
    dry-runs paid (about 2% of a dry run's start). Its fields are read-only (``Final``) and it
    compares and hashes by them, as a frozen dataclass does.

    Args:
        max_base: The longest base.
        suffix_len: How many random characters follow the base.
        allowed: A regex character class body of what the base may hold; every run of other
            characters becomes one ``-``.
        lower: Whether the name is lowercased first.
        trim: Characters stripped from both ends of the base (and from a cut end).
        squeeze: Whether runs of ``-`` (which ``allowed`` may keep) become one ``-``.
        hash_cut: Whether a base longer than ``max_base`` ends in ``-`` and 6 hex digits of
            the name's SHA-256, so distinct long names keep distinct bases; otherwise it is
            cut.
        letter_prefix: Put before a base that does not start with a letter (``""``: none).
        empty: The base of a name without one allowed character.
    """

    __slots__ = ("allowed", "empty", "hash_cut", "letter_prefix", "lower", "max_base", "squeeze",
                 "suffix_len", "trim")

    def __init__(
        self,
        max_base: int = 40,
        suffix_len: int = 8,
        allowed: str = "a-z0-9",
        lower: bool = True,
        trim: str = "-",
        squeeze: bool = False,
        hash_cut: bool = False,
        letter_prefix: str = "",
        empty: str = "app",
    ) -> None:
        self.max_base: Final = max_base
        self.suffix_len: Final = suffix_len
        self.allowed: Final = allowed
        self.lower: Final = lower
        self.trim: Final = trim
        self.squeeze: Final = squeeze
        self.hash_cut: Final = hash_cut
        self.letter_prefix: Final = letter_prefix
        self.empty: Final = empty

    def _fields(self) -> tuple[int, int, str, bool, str, bool, bool, str, str]:
        return (self.max_base, self.suffix_len, self.allowed, self.lower, self.trim,
                self.squeeze, self.hash_cut, self.letter_prefix, self.empty)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppIdRule):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"AppIdRule(max_base={self.max_base!r}, suffix_len={self.suffix_len!r}, "
                f"allowed={self.allowed!r}, lower={self.lower!r}, trim={self.trim!r}, "
                f"squeeze={self.squeeze!r}, hash_cut={self.hash_cut!r}, "
                f"letter_prefix={self.letter_prefix!r}, empty={self.empty!r})")

    @property
    def max_len(self) -> int:
        """The longest id the rule makes."""
        return self.max_base + 1 + self.suffix_len

    def base(self, app_name: str) -> str:
        """The base of ``app_name``'s ids.

        Args:
            app_name: ``AppDef.name`` (any characters, any length).

        Returns:
            At most :attr:`max_base` characters of :attr:`allowed`.
        """
        s = re.sub(f"[^{self.allowed}]+", "-", app_name.lower() if self.lower else app_name)
        if self.squeeze:
            s = re.sub("-{2,}", "-", s)
        s = s.strip(self.trim)
        if len(s) > self.max_base:
            if self.hash_cut:
                import hashlib

                digest = hashlib.sha256(app_name.encode("utf-8")).hexdigest()[:6]
                s = s[: self.max_base - 7].rstrip(self.trim) + "-" + digest
            else:
                s = s[: self.max_base].strip(self.trim)
        s = s or self.empty
        if self.letter_prefix and not (s and s[0].isalpha()):
            s = (self.letter_prefix + s)[: self.max_base].rstrip(self.trim)
        return s


DEFAULT_RULE = AppIdRule()
"""Lowercase letters, digits and ``-``; a base of at most 40 characters; 8 random characters."""


def make_app_id(app_name: str, rule: AppIdRule = DEFAULT_RULE, suffix: str | None = None) -> str:
    """A new submission id: ``{base}-{suffix}`` by the backend's rule.

    Args:
        app_name: ``AppDef.name``.
        rule: The backend's constraints.
        suffix: The suffix to use (tests pin it); ``None`` for :attr:`AppIdRule.suffix_len`
            fresh random characters of :data:`ID_ALPHABET`.

    Returns:
        The id, e.g. ``my-train-k3x9q0ab``.
    """
    if suffix is None:
        suffix = random_string(rule.suffix_len)
    return f"{rule.base(app_name)}-{suffix}"
