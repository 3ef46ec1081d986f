"""What a plugin search skipped: :class:`RegistrationError` (``tether.plugins`` exports it).

Kept apart from :mod:`tether.specs.plugins`, which imports it when it records the first
skip: every command looks plugins up, and a search that skips nothing (the usual case) does
not build this frozen dataclass, the costliest class of that module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RegistrationError:
    """A plugin module or plugin that was skipped, and why.

    Attributes:
        module: The module.
        error: What went wrong.
        name: The plugin's name (None when the module itself failed to import).
        plugin_type: The plugin's kind, lower case (None as for ``name``).
    """

    module: str
    error: str
    name: str | None = None
    plugin_type: str | None = None
