"""Runtime macros: placeholders in args, env and metadata that schedulers fill per replica.

A macro is written ``${name}``; in a value that holds a macro, ``$$`` stands for a literal
``$``. Unknown ``$names`` are left untouched, so shell variables in args survive substitution,
and a value without any macro passes through byte for byte (``pa$$word`` stays as it is).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.specs.app import Role


class macros:
    """The macro names. Use them inside ``Role.args``, ``Role.env`` values or metadata.

    Attributes:
        app_id: The scheduler-assigned application id.
        replica_id: The replica's index within its role (``0``, ``1``, ...).
        img_root: Root directory of the image on the host (the working directory for
            ``local_cwd``).
        base_img_root: Root directory of the base image (same as ``img_root`` where images
            are not layered).
        rank0_env: The *name* of an environment variable that holds rank 0's host address
            (``TETHER_RANK0_HOST``); expand it with the shell or read it in the app.
    """

    app_id = "${app_id}"
    replica_id = "${replica_id}"
    img_root = "${img_root}"
    base_img_root = "${base_img_root}"
    rank0_env = "${rank0_env}"

    @dataclass
    class Values:
        """Concrete values of the macros for one replica."""

        img_root: str
        app_id: str
        replica_id: str
        rank0_env: str = "TETHER_RANK0_HOST"
        base_img_root: str = ""

        def _mapping(self) -> dict[str, str]:
            return {
                "img_root": self.img_root,
                "app_id": self.app_id,
                "replica_id": self.replica_id,
                "rank0_env": self.rank0_env,
                "base_img_root": self.base_img_root or self.img_root,
            }

        def substitute(self, text: str) -> str:
            """Replaces the macros in ``text``; there, ``$$`` becomes ``$``.

            A text without any macro is returned unchanged (``$$`` included).

            Args:
                text: A string that may contain macros.

            Returns:
                The substituted string.
            """
            mapping = self._mapping()
            for m in Template.pattern.finditer(text):
                if (m.group("named") or m.group("braced")) in mapping:
                    return Template(text).safe_substitute(mapping)
            return text

        def to_dict(self) -> dict[str, str]:
            """The macro values by name (``base_img_root`` defaults to ``img_root``)."""
            return self._mapping()

        def _nested(self, value: Any) -> Any:
            if isinstance(value, str):
                return self.substitute(value)
            if isinstance(value, dict):
                return {k: self._nested(v) for k, v in value.items()}
            if isinstance(value, list):
                return [self._nested(v) for v in value]
            return value

        def apply(self, role: Role) -> Role:
            """Returns a copy of ``role`` with macros substituted in args, env and metadata
            (also inside metadata's nested dicts and lists).

            The copy shares ``role.overrides`` (the same dict, not a copy: an override may be
            a coroutine or future, which cannot be copied).

            Args:
                role: The role (not modified).

            Returns:
                The substituted copy.
            """
            out = copy.deepcopy(role, {id(role.overrides): role.overrides})
            out.args = [self.substitute(a) for a in out.args]
            out.env = {k: self.substitute(v) for k, v in out.env.items()}
            out.metadata = self._nested(out.metadata)
            return out
