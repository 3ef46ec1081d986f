"""The job model: :class:`Role` (a set of identical replicas) and :class:`AppDef` (a job)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.specs.checks import check_app, check_role, raise_problems
from tether.specs.mounts import Mount
from tether.specs.resources import NULL_RESOURCE, Resource
from tether.specs.secrets import SecretRef
from tether.specs.status import RetryPolicy

if TYPE_CHECKING:
    from tether.workspace.api import Workspace


async def _await(value: Awaitable[Any]) -> Any:
    return await value


@dataclass
class Role:
    """A set of identical replicas of one program.

    Attributes:
        name: Role name, unique within the app.
        image: Container image, or a directory for local schedulers.
        entrypoint: The program to run.
        args: Arguments to the entrypoint; may contain :class:`~tether.specs.macros`.
        env: Environment variables; values may contain macros.
        secrets: Environment variables whose values come from secrets the backend holds
            (name -> :class:`~tether.specs.SecretRef`); rendered as native references,
            never as plaintext.
        num_replicas: How many replicas to run.
        min_replicas: For elastic jobs, the fewest replicas the job can run with.
        max_retries: How many times a failure is retried (see ``retry_policy``).
        retry_policy: What restarts on a failure.
        resource: Hardware per replica.
        port_map: Named ports the replica listens on.
        mounts: Bind, volume and device mounts.
        workspace: A project directory to ship with the role (see :mod:`tether.workspace`).
        metadata: Scheduler-specific metadata; values may contain macros. Overlays live
            here (``metadata[backend][kind]``, see :func:`tether.specs.overlays.set_overlay`).
        overrides: Deferred attributes (TorchX's ``Role.overrides``): attribute name -> a
            value, a callable or an awaitable whose result replaces the attribute when
            :meth:`resolve_overrides` runs (``submit_dryrun`` calls it before rendering), e.g.
            ``overrides={"image": build_image}``.
    """

    name: str
    image: str = ""
    entrypoint: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, SecretRef] = field(default_factory=dict)
    num_replicas: int = 1
    min_replicas: int | None = None
    max_retries: int = 0
    retry_policy: RetryPolicy = RetryPolicy.APPLICATION
    resource: Resource = field(default_factory=lambda: copy.deepcopy(NULL_RESOURCE))
    port_map: dict[str, int] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    workspace: Workspace | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)

    def resolve_overrides(self) -> None:
        """Sets each pending override as its attribute, computing callables (and awaiting
        coroutines) now.

        TorchX computes an override when the attribute is first read; tether resolves them all
        at one explicit point instead: :meth:`~tether.schedulers.api.Scheduler.submit_dryrun`
        calls this before rendering (no attribute-access magic). Resolved entries leave
        ``overrides``.
        """
        for name in list(self.overrides):
            value = self.overrides.pop(name)
            if callable(value):
                value = value()
            if inspect.isawaitable(value):
                value = asyncio.run(_await(value))
            setattr(self, name, value)

    def __post_init__(self) -> None:
        if isinstance(self.args, tuple):
            self.args = list(self.args)
        if isinstance(self.retry_policy, str) and not isinstance(self.retry_policy, RetryPolicy):
            with contextlib.suppress(ValueError):
                self.retry_policy = RetryPolicy(self.retry_policy)
        raise_problems(check_role(self), "Role")

    def pre_proc(self, scheduler: str, dryrun_info: Any) -> Any:
        """Hook for roles that adjust the native request of a scheduler (identity by default).

        Args:
            scheduler: The scheduler's backend name.
            dryrun_info: The native request.

        Returns:
            The (possibly modified) request.
        """
        return dryrun_info


@dataclass
class AppDef:
    """A job: one or more roles that run together.

    Attributes:
        name: Job name (schedulers derive valid native names from it).
        roles: The roles.
        metadata: Scheduler-specific metadata.
    """

    name: str
    roles: list[Role] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.roles, tuple):
            self.roles = list(self.roles)
        raise_problems(check_app(self), "AppDef")
