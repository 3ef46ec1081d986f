"""The schedulers a Runner holds, and what it asks of a scheduler as a whole.

:class:`SchedulerPool` builds each scheduler on first use (from the registry or the factories
it was given, with the parameters meant for it), keeps one instance per name for the runner's
life and closes them together. It also answers the questions about a scheduler rather than an
app: its capabilities, its run options, and the secrets it holds for jobs.
:class:`~tether.runner.api.Runner` builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from tether.config import TetherConfig, load_config
from tether.schedulers import (
    UnknownSchedulerError,
    get_scheduler_factories,
    get_scheduler_factory,
)
from tether.schedulers.api import Scheduler
from tether.schedulers.capabilities import Capabilities
from tether.specs import AppDef, AppHandle, CfgVal, parse_app_handle, runopts

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

    # ---- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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

    def scheduler_backends(self) -> list[str]:
        """Names of the schedulers this runner can use."""
        return list(self._factories or get_scheduler_factories())

    def _scheduler(self, name: str) -> Scheduler[Any]:
        sched = self._schedulers.get(name)
        if sched is None:
            if self._factories is not None:
                if name not in self._factories:
                    import difflib  # for an error's hint only: not on the start-up path

                    close = difflib.get_close_matches(name, list(self._factories), n=3, cutoff=0.5)
                    hint = f"; did you mean {', '.join(close)}?" if close else ""
                    raise UnknownSchedulerError(
                        f"unknown scheduler {name!r}{hint} "
                        f"(available: {', '.join(self._factories)})",
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
        names = set(self.scheduler_backends())
        by_name = all(k in names and isinstance(v, Mapping) for k, v in params.items())
        return dict(params.get(name, {})) if by_name else dict(params)

    def _scheduler_for(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str]:
        parsed = parse_app_handle(app_handle)
        return self._scheduler(parsed.scheduler_backend), parsed.app_id

    # ---- a scheduler as a whole ------------------------------------------------------------
    def scheduler_capabilities(self, scheduler: str) -> Capabilities:
        """What a scheduler supports (its declared capabilities).

        Args:
            scheduler: The scheduler's name.

        Returns:
            Its capabilities.
        """
        return self._scheduler(scheduler).capabilities

    def scheduler_run_opts(self, scheduler: str) -> runopts:
        """The run options of a scheduler.

        Args:
            scheduler: Its name.

        Returns:
            The options.
        """
        return self._scheduler(scheduler).run_opts()

    def cfg_from_str(self, scheduler: str, *cfg_literal: str) -> Mapping[str, CfgVal]:
        """Parses ``-cfg`` strings with a scheduler's run options, as TorchX's Runner.

        ``runner.cfg_from_str("local_cwd", "log_dir=/tmp/x", "prepend_cwd=True")`` gives
        ``{"log_dir": "/tmp/x", "prepend_cwd": True}``; a later string wins on a repeated key.

        Args:
            scheduler: Its name.
            *cfg_literal: Strings of ``key=value`` items (see ``runopts.cfg_from_str``).

        Returns:
            The typed options.
        """
        opts = self.scheduler_run_opts(scheduler)
        cfg: dict[str, CfgVal] = {}
        for literal in cfg_literal:
            cfg.update(opts.cfg_from_str(literal))
        return cfg

    # ---- secrets the caller hands over -----------------------------------------------------
    def put_secret(
        self,
        scheduler: str,
        name: str,
        values: Mapping[str, str],
        cfg: Mapping[str, CfgVal] | None = None,
    ) -> None:
        """Stores values as a secret the scheduler holds (a Kubernetes Secret), for
        :class:`~tether.specs.SecretRef` references ``(name, key)``. Creates or replaces it.

        Args:
            scheduler: The scheduler's name.
            name: The secret's name.
            values: Key to value.
            cfg: Run options (where the secret lives, e.g. the Kubernetes namespace).

        Raises:
            NotImplementedError: When the scheduler holds no secrets.
        """
        sched = self._scheduler(scheduler)
        opts = sched.run_opts()
        resolved = opts.resolve(self.config.apply(scheduler, cfg, opts), scheduler)
        sched.put_secret(name, values, resolved)

    def delete_secret(
        self, scheduler: str, name: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> None:
        """Deletes a secret made by :meth:`put_secret` (idempotent).

        Args:
            scheduler: The scheduler's name.
            name: The secret's name.
            cfg: Run options (where the secret lives).
        """
        sched = self._scheduler(scheduler)
        opts = sched.run_opts()
        resolved = opts.resolve(self.config.apply(scheduler, cfg, opts), scheduler)
        sched.delete_secret(name, resolved)
