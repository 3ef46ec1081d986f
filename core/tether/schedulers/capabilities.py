"""What a scheduler can do, declared in one typed place, and the dryrun check against it.

Each backend sets ``Scheduler.capabilities`` to a :class:`Capabilities`. The Runner, the CLI
and the adapters read it (never a backend's name, never ``getattr`` probing), and
:func:`check_app` rejects at dryrun an AppDef that asks for something the backend cannot do,
naming the backend, the role and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from tether.errors import SpecError
from tether.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Mount,
    RetryPolicy,
    Role,
    VolumeMount,
)


class Stream(str, Enum):
    """Which output stream(s) ``log_iter`` returns."""

    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


class FollowMode(str, Enum):
    """How a process follows many jobs of a backend at once (see :mod:`tether.schedulers.watch`).

    * ``list_watch``: one list + watch stream per connection (Kubernetes informers).
    * ``batch_poll``: one batched read per interval for every followed job (``squeue`` +
      ``sacct``, ``DescribeJobs`` with 100 ids, one jobs listing).
    * ``state_scan``: one scan of a local state directory per interval.
    * ``describe_each``: one ``describe`` per followed job per interval (the fallback).
    """

    LIST_WATCH = "list_watch"
    BATCH_POLL = "batch_poll"
    STATE_SCAN = "state_scan"
    DESCRIBE_EACH = "describe_each"


class Follow:
    """How a backend is followed by the process's watch hub.

    A plain class, not a frozen dataclass, whose generated methods would be compiled when
    this module is imported, at every command's start: its fields are read-only (``Final``)
    and it compares and hashes by them (build a changed copy with ``Follow(...)``, not
    ``dataclasses.replace``).

    Args:
        mode: The mechanism (for docs, the CLI and the benchmark).
        source: Module holding ``follow_target(scheduler, app_id)``, which names the shared
            view an app belongs to and builds its reader (imported only when a job of the
            backend is followed). None: the generic one-``describe``-per-job reader.
        interval: Seconds between two reads of the shared view (a watch stream delivers
            changes at once; the interval then only bounds how stale a time-based state is).
    """

    __slots__ = ("interval", "mode", "source")

    def __init__(
        self,
        mode: FollowMode = FollowMode.DESCRIBE_EACH,
        source: str | None = None,
        interval: float = 5.0,
    ) -> None:
        self.mode: Final = mode
        self.source: Final = source
        self.interval: Final = interval

    def _fields(self) -> tuple[FollowMode, str | None, float]:
        return (self.mode, self.source, self.interval)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Follow):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Follow(mode={self.mode!r}, source={self.source!r}, interval={self.interval!r})"


DEFAULT_FOLLOW = Follow()
"""The generic follow: one ``describe`` per followed job per interval (the default)."""


class MountKind(str, Enum):
    """The kinds of :class:`~tether.specs.Mount`."""

    BIND = "bind"
    VOLUME = "volume"
    DEVICE = "device"


def mount_kind(m: Mount) -> MountKind:
    """The kind of a mount.

    Args:
        m: The mount.

    Returns:
        Its kind.
    """
    if isinstance(m, BindMount):
        return MountKind.BIND
    if isinstance(m, VolumeMount):
        return MountKind.VOLUME
    if isinstance(m, DeviceMount):
        return MountKind.DEVICE
    raise TypeError(f"not a mount: {m!r}")


@dataclass(frozen=True)
class Capabilities:
    """What a scheduler supports.

    Attributes:
        runs_on_this_host: Replicas run on the launcher's machine (``tether run`` then waits
            and streams the output unless ``--detach``).
        needs_image: Every role must name a container image.
        durable: Apps outlive the process that launched them and can be described, logged
            and cancelled from any process later.
        workspaces: Workspace kinds the scheduler builds (``dir``: replicas run in the
            directory; ``image``: an image is built from it).
        streams: Streams ``log_iter`` can return.
        log_time_filter: ``log_iter`` honours ``since``/``until``.
        log_tail: ``log_iter`` can follow a live replica (``should_tail``).
        native_retries: Retry policies the engine applies itself (rendered into the request).
        reconciled_retries: Retry policies tether applies through :meth:`Scheduler.reconcile`.
        gang: Gang scheduling (all replicas start together or none).
        elastic: Starts a role once ``Role.min_replicas`` replicas are placed (a backend that
            is not elastic starts all ``num_replicas``, which satisfies any minimum).
        mounts: Mount kinds it renders.
        secrets: Renders ``Role.secrets`` as native secret references.
        port_map: Exposes ``Role.port_map``.
        list_apps: ``list`` returns the apps it launched.
        job_identity: Records ``tether.job_key`` natively so ``find_jobs`` finds it.
        max_roles: The most roles one app may have (None: no limit).
        kubernetes_pods: Replicas run as pods of a Kubernetes cluster, placed by the run
            options ``namespace`` (str), ``node_selector`` (dict) and ``tolerations`` (list).
            The KFP adapter relies on it: a one-replica job may run as the pipeline's own pod
            (a native step), and a launcher step's job goes to the pipeline's namespace with
            the step's node selectors and tolerations.
        follow: How the watch hub follows many of its jobs at once (see :class:`Follow`).
        ui_urls: ``describe`` may give a page of the job in a UI (``ui_url``); False: it
            never does (an adapter then reads no status to look for a link).
    """

    runs_on_this_host: bool = False
    needs_image: bool = True
    durable: bool = True
    workspaces: frozenset[str] = frozenset()
    streams: frozenset[Stream] = frozenset({Stream.COMBINED})
    log_time_filter: bool = False
    log_tail: bool = True
    native_retries: frozenset[RetryPolicy] = frozenset()
    reconciled_retries: frozenset[RetryPolicy] = frozenset()
    gang: bool = False
    elastic: bool = False
    mounts: frozenset[MountKind] = frozenset()
    secrets: bool = False
    port_map: bool = True
    list_apps: bool = True
    job_identity: bool = True
    max_roles: int | None = None
    kubernetes_pods: bool = False
    follow: Follow = DEFAULT_FOLLOW
    ui_urls: bool = True

    @property
    def retries(self) -> frozenset[RetryPolicy]:
        """Every retry policy it honours, natively or reconciled."""
        return self.native_retries | self.reconciled_retries


class UnsupportedFeatureError(SpecError):
    """An AppDef asks for something its scheduler cannot do (raised at dryrun)."""


class Shortfall:
    """One thing an app needs that a backend's capabilities lack (a plain class, as
    :class:`Follow`; read-only, compares by its fields).

    Args:
        capability: The :class:`Capabilities` field that lacks it (``secrets``, ``mounts``...).
        text: What is missing, naming the role and the app's field.
    """

    __slots__ = ("capability", "text")

    def __init__(self, capability: str, text: str) -> None:
        self.capability: Final = capability
        self.text: Final = text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Shortfall):
            return NotImplemented
        return (self.capability, self.text) == (other.capability, other.text)

    def __hash__(self) -> int:
        return hash((self.capability, self.text))

    def __repr__(self) -> str:
        return f"Shortfall(capability={self.capability!r}, text={self.text!r})"


def shortfalls(app: AppDef, caps: Capabilities, backend: str) -> list[Shortfall]:
    """What ``backend`` cannot run of ``app``, each with the capability that lacks it.

    Args:
        app: The app (already validated as a spec).
        caps: The backend's capabilities.
        backend: Its name, for the messages.

    Returns:
        The shortfalls (empty: the backend can run the app).
    """
    out: list[Shortfall] = []
    if caps.max_roles is not None and len(app.roles) > caps.max_roles:
        out.append(Shortfall("max_roles", f"the app has {len(app.roles)} roles; {backend} runs "
                                          f"at most {caps.max_roles}"))  # fmt: skip
    for role in app.roles:
        out += _role_shortfalls(role, caps, backend)
    return out


def _role_shortfalls(role: Role, caps: Capabilities, backend: str) -> list[Shortfall]:
    where = f"role {role.name!r}"
    out: list[Shortfall] = []
    if caps.needs_image and not role.image:
        out.append(Shortfall("needs_image", f"{where}: image is empty; {backend} runs a "
                                            "container image"))  # fmt: skip
    if role.workspace is not None and not caps.workspaces:
        out.append(Shortfall("workspaces", (
            f"{where}: has a workspace ({role.workspace}), but {backend} does not build "
            "workspaces; bake the code into the image and drop --workspace")))  # fmt: skip
    if role.max_retries > 0 and role.retry_policy not in caps.retries:
        allowed = sorted(p.value for p in caps.retries) or ["none (max_retries=0)"]
        out.append(Shortfall("retries", (
            f"{where}: retry_policy={role.retry_policy.value} is not supported by {backend} "
            f"(supported: {', '.join(allowed)})")))  # fmt: skip
    for m in role.mounts:
        kind = mount_kind(m)
        if kind not in caps.mounts:
            allowed = sorted(k.value for k in caps.mounts) or ["none"]
            out.append(Shortfall("mounts", (
                f"{where}: mounts has a {kind.value} mount, which {backend} does not "
                f"support (supported: {', '.join(allowed)})")))  # fmt: skip
    if role.secrets and not caps.secrets:
        out.append(Shortfall("secrets", (
            f"{where}: secrets {sorted(role.secrets)} cannot be given by {backend} "
            "(it has no secret references); pass them another way")))  # fmt: skip
    if role.port_map and not caps.port_map:
        out.append(Shortfall("port_map", f"{where}: port_map is not supported by {backend}"))
    return out


def check_app(app: AppDef, caps: Capabilities, backend: str) -> None:
    """Rejects what ``backend`` cannot run, naming the role, the field and what is allowed.

    Args:
        app: The app (already validated as a spec).
        caps: The backend's capabilities.
        backend: Its name, for the messages.

    Raises:
        UnsupportedFeatureError: Listing every problem.
    """
    errs = [s.text for s in shortfalls(app, caps, backend)]
    if errs:
        raise UnsupportedFeatureError(
            f"{backend} cannot run app {app.name!r}:\n  - " + "\n  - ".join(errs)
        )
