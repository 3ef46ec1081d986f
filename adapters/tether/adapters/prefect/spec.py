"""What a component task runs: :class:`TaskSpec`, kept on the task's function.

The task module builds it; the runner of a task (:mod:`tether.adapters.prefect.run`), the
cache policy and the dry-run read it. It sits below all of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.adapters.common import materialize
from tether.adapters.prefect.identity import parameters_digest
from tether.specs import AppDef, CfgVal

if TYPE_CHECKING:
    from tether.runner import Runner

SPEC_ATTR = "__tether_spec__"
"""Attribute of the task's function holding its :class:`TaskSpec`."""


@dataclass(frozen=True)
class TaskSpec:
    """What a component task runs (kept on the task's function for dry-runs).

    Attributes:
        component: The component as given (name or function).
        component_name: Its resolved name (``utils.python``, ``module:fn``).
        fn: The component function.
        signature: The component's signature (annotations evaluated).
        scheduler: The scheduler, or None for the configured default.
        cfg: Run options.
        image: Replaces every role's image, when set.
        env: Added to every role's env.
        poll_interval: Longest single wait while following the job, in seconds.
        asynchronous: Whether the task is a coroutine function (for async flows).
    """

    component: str | Callable[..., AppDef]
    component_name: str
    fn: Callable[..., AppDef]
    signature: inspect.Signature
    scheduler: str | None = None
    cfg: Mapping[str, CfgVal] = field(default_factory=dict)
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    poll_interval: float = 1.0
    asynchronous: bool = False

    def digest(self) -> str:
        """A hash of what the task runs besides its parameters: component, scheduler, cfg,
        image and env (env values enter only hashed). Part of the job key and cache key.

        Returns:
            Hex digest.
        """
        import hashlib

        env = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in self.env.items()}
        return parameters_digest({
            "component": self.component_name, "scheduler": self.scheduler,
            "cfg": dict(self.cfg), "image": self.image, "env": env,
        })

    def component_args(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The component's keyword arguments from the task's bound arguments.

        Values equal to the signature's default are left out, so that ``[component:<name>]``
        defaults of ``.tetherconfig`` apply as they do on the command line.

        Args:
            arguments: Parameter name to value (``*args`` as a tuple).

        Returns:
            Arguments for :func:`tether.adapters.common.materialize`.
        """
        out: dict[str, Any] = {}
        for name, value in arguments.items():
            param = self.signature.parameters[name]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    out[name] = list(value)
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            elif not _is_default(param, value):
                out[name] = value
        return out

    def resolve_scheduler(self, runner: Runner) -> str:
        """The scheduler to use: the given one, ``[cli:run] scheduler``, or the first known.

        Args:
            runner: The runner (for ``.tetherconfig`` and the scheduler registry).

        Returns:
            The scheduler's name.
        """
        if self.scheduler:
            return self.scheduler
        configured = runner.config.cli_defaults("run").get("scheduler")
        return configured or runner.scheduler_backends()[0]

    def materialize(self, runner: Runner, arguments: Mapping[str, Any]) -> AppDef:
        """Builds the AppDef for one call.

        Args:
            runner: The runner (for ``.tetherconfig`` component defaults).
            arguments: The task's bound arguments.

        Returns:
            The AppDef.
        """
        return materialize(
            self.fn,  # resolved once, when the task was defined
            self.component_args(arguments),
            image=self.image,
            env=self.env or None,
            defaults=runner.config.component_defaults(self.component_name),
        )


def _is_default(param: inspect.Parameter, value: Any) -> bool:
    default = param.default
    if default is inspect.Parameter.empty:
        return False
    return value is default or (type(value) is type(default) and value == default)
