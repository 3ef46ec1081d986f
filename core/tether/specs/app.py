"""The job model: :class:`Role` (a set of identical replicas) and :class:`AppDef` (a job)."""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.specs.checks import (
    MAX_REPLICAS_ENV,
    Problem,
    check_env_name,
    check_mapping,
    check_retry_policy,
    check_str,
    got,
    is_int,
    max_replicas,
    raise_type_problems,
    short_repr,
    type_name,
)
from tether.specs.mounts import BindMount, DeviceMount, Mount, VolumeMount
from tether.specs.resources import NULL_RESOURCE, Resource, check_resource
from tether.specs.secrets import SecretRef
from tether.specs.states import RetryPolicy

if TYPE_CHECKING:
    from tether.specs.recovery import RecoveryPolicy
    from tether.specs.workspace import Workspace


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
                import asyncio  # only here: it costs more to import than the rest of specs

                value = asyncio.run(_await(value))
            setattr(self, name, value)

    def __post_init__(self) -> None:
        if isinstance(self.args, tuple):
            self.args = list(self.args)
        if isinstance(self.retry_policy, str) and not isinstance(self.retry_policy, RetryPolicy):
            with contextlib.suppress(ValueError):
                self.retry_policy = RetryPolicy(self.retry_policy)
        raise_type_problems(check_role(self), "Role")

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
        recovery: When to submit the app again after a failure (infrastructure causes by
            default), how many times and with what backoff; None: never (see
            :class:`~tether.specs.recovery.RecoveryPolicy` and ``docs/recovery.md``).
        checkpoint: Where the app keeps its checkpoints (a path every replica sees, or an
            fsspec URL such as ``s3://bucket/run``); passed to every replica as
            ``$TETHER_CHECKPOINT`` so a recovered attempt resumes from it.
        attempt: Which attempt of the job this is (0: the first submission; a recovery
            submits attempt 1, 2...); replicas see it as ``$TETHER_ATTEMPT`` when
            ``recovery`` or ``checkpoint`` is set.
    """

    name: str
    roles: list[Role] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    recovery: RecoveryPolicy | None = None
    checkpoint: str | None = None
    attempt: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.roles, tuple):
            self.roles = list(self.roles)
        raise_type_problems(check_app(self), "AppDef")


def check_role(role: Any) -> list[Problem]:
    """Checks the fields of a :class:`~tether.specs.Role` (types, ranges, names, NUL bytes).

    An empty entrypoint is not reported here (a role may be completed after construction);
    :func:`tether.specs.validate` reports it.

    Args:
        role: The role.

    Returns:
        The problems found, each naming the role and the field.
    """
    if not isinstance(role, Role):
        return [Problem(f"a role must be a Role, got {got(role)}", True)]
    name_problems = check_str("role name", role.name, empty_ok=False)
    if any(p.is_type for p in name_problems):
        return name_problems
    where = f"role {role.name!r}"
    out = name_problems + check_str(f"{where}: image", role.image)
    out += check_str(f"{where}: entrypoint", role.entrypoint)
    if not isinstance(role.args, list):
        out.append(
            Problem(f"{where}: args must be a list of str, got {type_name(role.args)}", True)
        )
    else:
        for i, a in enumerate(role.args):
            out += check_str(f"{where}: args[{i}]", a)
    for fld in ("env", "secrets", "port_map", "metadata"):
        out += check_mapping(f"{where}: {fld}", getattr(role, fld))
    if isinstance(role.env, Mapping):
        for k, v in role.env.items():
            out += check_env_name(f"{where}: env", k)
            out += check_str(f"{where}: env[{short_repr(k)}]", v)
    if isinstance(role.secrets, Mapping):
        for k, ref in role.secrets.items():
            out += check_env_name(f"{where}: secrets", k)
            if not isinstance(ref, SecretRef):
                out.append(
                    Problem(
                        f"{where}: secrets[{short_repr(k)}] must be a SecretRef, got "
                        f"{got(ref)}",
                        True,
                    )
                )
            else:
                out += check_str(
                    f"{where}: secrets[{short_repr(k)}].name", ref.name, empty_ok=False
                )
                out += check_str(f"{where}: secrets[{short_repr(k)}].key", ref.key)
            if isinstance(role.env, Mapping) and k in role.env:
                out.append(Problem(f"{where}: {k!r} is set in both env and secrets; keep one"))
    bound = max_replicas()
    if not is_int(role.num_replicas):
        out.append(
            Problem(
                f"{where}: num_replicas must be an int in 1..{bound}, got "
                f"{got(role.num_replicas)}",
                True,
            )
        )
    elif not 1 <= role.num_replicas <= bound:
        out.append(
            Problem(
                f"{where}: num_replicas = {role.num_replicas} is out of range 1..{bound} "
                f"(set ${MAX_REPLICAS_ENV} to allow more)"
            )
        )
    if role.min_replicas is not None:
        if not is_int(role.min_replicas):
            out.append(
                Problem(
                    f"{where}: min_replicas must be an int or None, got "
                    f"{got(role.min_replicas)}",
                    True,
                )
            )
        elif role.min_replicas < 0 or (
            is_int(role.num_replicas) and role.min_replicas > role.num_replicas
        ):
            out.append(
                Problem(
                    f"{where}: min_replicas = {role.min_replicas} must be in "
                    f"0..num_replicas ({role.num_replicas})"
                )
            )
    if not is_int(role.max_retries):
        out.append(
            Problem(
                f"{where}: max_retries must be an int >= 0, got "
                f"{got(role.max_retries)}",
                True,
            )
        )
    elif role.max_retries < 0:
        out.append(Problem(f"{where}: max_retries = {role.max_retries} must be >= 0"))
    out += check_retry_policy(f"{where}: retry_policy", role.retry_policy)
    out += check_resource(role.resource, f"{where}: resource")
    if isinstance(role.port_map, Mapping):
        for pname, port in role.port_map.items():
            out += check_str(f"{where}: port_map key", pname, empty_ok=False)
            if not is_int(port) or not 0 < port < 65536:
                out.append(
                    Problem(
                        f"{where}: port_map[{short_repr(pname)}] = {short_repr(port)} is "
                        "not a port (an int in 1..65535)",
                        not is_int(port),
                    )
                )
    if not isinstance(role.mounts, list):
        out.append(Problem(f"{where}: mounts must be a list, got {type_name(role.mounts)}", True))
    else:
        for m in role.mounts:
            if not isinstance(m, (BindMount, VolumeMount, DeviceMount)):
                out.append(
                    Problem(
                        f"{where}: mount {short_repr(m)} is not a BindMount, "
                        "VolumeMount or DeviceMount",
                        True,
                    )
                )
    return out


def check_app(app: Any) -> list[Problem]:
    """Checks an :class:`~tether.specs.AppDef` and each of its roles.

    Args:
        app: The app.

    Returns:
        The problems found.
    """
    if not isinstance(app, AppDef):
        return [Problem(f"app must be an AppDef, got {got(app)}", True)]
    out = check_app_fields(app)
    if not isinstance(app.roles, list):
        out.append(Problem(f"app roles must be a list of Role, got {type_name(app.roles)}", True))
        return out
    for role in app.roles:
        out += check_role(role)
    return out


def check_app_fields(app: AppDef) -> list[Problem]:
    """Checks the fields of an app but its roles (:func:`check_app` checks those too).

    Args:
        app: The app.

    Returns:
        The problems found.
    """
    out = check_str("app name", app.name, empty_ok=False)
    out += check_mapping("app metadata", app.metadata)
    return out + _check_recovery(app)


def _check_recovery(app: AppDef) -> list[Problem]:
    """Checks the recovery fields of an app (``recovery``, ``checkpoint``, ``attempt``).

    An app that sets none of them (most apps, every dry run of one) does not import
    :mod:`tether.specs.recovery`.
    """
    if app.recovery is None and app.checkpoint is None and type(app.attempt) is int and (
            app.attempt == 0):
        return []
    from tether.specs.recovery import check_attempt, check_checkpoint, check_policy

    return (check_policy(app.recovery) + check_checkpoint(app.checkpoint)
            + check_attempt(app.attempt))


ROLE_NEEDS_FILES = "tether.needs_files"
"""``Role.metadata`` key: the paths (relative to the role's working directory) its command
needs, e.g. ``dist.ddp``'s ``--script``. Schedulers that run roles on this host check them
at dryrun, so a typo fails before anything starts."""
