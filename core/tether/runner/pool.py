"""The schedulers a Runner holds: built on first use, one per name, closed together.

:class:`SchedulerPool` builds each scheduler from the registry or the factories it was given,
with the parameters meant for it, keeps one instance per name for the runner's life and
closes them together. :class:`~tether.runner.api.Runner` holds one, and so does the
:class:`~tether.runner.launched.LaunchedApps` it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.config import TetherConfig, load_config
from tether.schedulers import (
    UnknownSchedulerError,
    get_scheduler_factories,
    get_scheduler_factory,
)
from tether.schedulers.api import Scheduler
from tether.specs import AppDef, AppHandle, parse_app_handle

if TYPE_CHECKING:
    from tether.schedulers import SchedulerFactory

DEFAULT_SESSION = "tether"


class SchedulerPool:
    """The schedulers of one session, built on first use and closed together.

    Args:
        name: Session name, part of every handle.
        scheduler_factories: Available schedulers (default: the registry).
        scheduler_params: Keyword arguments for scheduler factories, by scheduler name or one
            flat dict for every factory (see :class:`~tether.runner.api.Runner`).
        config: The ``.tetherconfig`` (default: loaded from the usual places).
    """

    def __init__(
        self,
        name: str = DEFAULT_SESSION,
        scheduler_factories: Mapping[str, SchedulerFactory] | None = None,
        scheduler_params: Mapping[str, Any] | None = None,
        config: TetherConfig | None = None,
    ) -> None:
        self._name = name
        self._factories = dict(scheduler_factories) if scheduler_factories is not None else None
        self._scheduler_params = dict(scheduler_params or {})
        self._config = config
        self._schedulers: dict[str, Scheduler[Any]] = {}
        # the AppDefs this runner submitted, by handle: describe() gives them back as TorchX
        self._submitted: dict[AppHandle, AppDef] = {}

    @property
    def name(self) -> str:
        """The session name, part of every handle."""
        return self._name

    def close(self) -> None:
        """Closes every scheduler this runner created. Safe to call twice."""
        for sched in self._schedulers.values():
            sched.close()
        self._schedulers.clear()

    @property
    def config(self) -> TetherConfig:
        """The ``.tetherconfig`` in effect (loaded on first use)."""
        if self._config is None:
            self._config = load_config()
        return self._config

    def remember(self, app_handle: AppHandle, app: AppDef) -> None:
        """Keeps the AppDef submitted as ``app_handle`` (see :meth:`submitted`).

        Args:
            app_handle: The handle.
            app: The AppDef.
        """
        self._submitted[app_handle] = app

    def submitted(self, app_handle: AppHandle) -> AppDef | None:
        """The AppDef this session submitted as ``app_handle``, if it did.

        Args:
            app_handle: The handle.

        Returns:
            The AppDef, or None.
        """
        return self._submitted.get(app_handle)

    def built(self) -> list[str]:
        """Names of the schedulers built so far."""
        return list(self._schedulers)

    def backends(self) -> list[str]:
        """Names of the schedulers this runner can use."""
        return list(self._factories or get_scheduler_factories())

    def get(self, name: str) -> Scheduler[Any]:
        """The scheduler named ``name``, built on first use.

        Args:
            name: The scheduler's name.

        Returns:
            The scheduler.

        Raises:
            KeyError: For a name the pool has no factory for (with close matches).
        """
        sched = self._schedulers.get(name)
        if sched is None:
            if self._factories is not None:
                if name not in self._factories:
                    import difflib  # for an error's hint only: not on the start-up path

                    close = difflib.get_close_matches(name, list(self._factories), n=3, cutoff=0.5)
                    hint = f"; did you mean {', '.join(close)}?" if close else ""
                    raise UnknownSchedulerError(
                        f"unknown scheduler {name!r}{hint} "
                        f"(available: {', '.join(self._factories)})"
                    )
                factory = self._factories[name]
            else:
                factory = get_scheduler_factory(name)
            sched = factory(self._name, **self._params_for(name))
            self._schedulers[name] = sched
        return sched

    def _params_for(self, name: str) -> dict[str, Any]:
        params = self._scheduler_params
        if not params:
            return {}
        names = set(self.backends())
        by_name = all(k in names and isinstance(v, Mapping) for k, v in params.items())
        return dict(params.get(name, {})) if by_name else dict(params)

    def for_handle(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str]:
        """The scheduler a handle names, and the app's id on it.

        Args:
            app_handle: The handle.

        Returns:
            ``(scheduler, app_id)``.
        """
        parsed = parse_app_handle(app_handle)
        return self.get(parsed.scheduler_backend), parsed.app_id
