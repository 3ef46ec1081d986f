"""Components by name, for the Runner: find one, materialize it with its defaults, launch it.

:class:`Components` is the collaborator a :class:`~tether.runner.api.Runner` holds for
``materialize_component``, ``dryrun_component`` and ``run_component``: it finds the
component (a builtin, ``file.py:fn`` or ``pkg.module:fn``), merges its defaults (the
``.tetherconfig``'s, then the runner's own) and calls it; the runner hands the AppDef to its
``dryrun`` or ``run``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.config import TetherConfig
from tether.specs import AppDef


class Components:
    """Finds and materializes components by name (see the module docs).

    Args:
        config: The ``.tetherconfig`` in effect (called when a component is materialized).
        defaults: The runner's own default arguments, by component name (win over the
            config's).
    """

    def __init__(
        self,
        config: Callable[[], TetherConfig],
        defaults: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._config = config
        self._defaults = {k: dict(v) for k, v in (defaults or {}).items()}

    def materialize(
        self, component: str, component_args: list[str] | Mapping[str, Any]
    ) -> AppDef:
        """Finds a component by name and calls it with ``component_args``.

        Args:
            component: A builtin (``dist.ddp``), ``file.py:fn`` or ``pkg.module:fn``.
            component_args: CLI-style arguments, or keyword arguments.

        Returns:
            The AppDef.
        """
        from tether.components.args import materialize
        from tether.components.finder import get_component

        info = get_component(component)
        defaults = dict(self._config().component_defaults(info.name))
        defaults.update(self._defaults.get(info.name, {}))
        return materialize(info.fn, component_args, defaults)
