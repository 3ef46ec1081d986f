"""The scheduler interface every backend implements.

The contract, shared by every backend:

* ``submit_dryrun(app, cfg)`` renders the native request without side effects (it works
  offline); ``schedule(info)`` submits it and returns the app id.
* ``describe``/``list`` map native states to :class:`~tether.specs.AppState` through one table
  in the backend's module, with the native reason in ``msg``.
* ``cancel`` is idempotent: cancelling a finished, cancelled or unknown app is a no-op.
* **Job identity**: when ``app.metadata`` holds :data:`JOB_KEY` (set by the Runner from the
  caller's stable identity, e.g. an Airflow task instance), the backend records it with the
  job natively (a state index, a label, a tag, a comment) and :meth:`Scheduler.find_jobs`
  returns the jobs that carry it, oldest first.
"""

from __future__ import annotations

import abc
import builtins
import copy
import re
import time
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from tether.schedulers.capabilities import Capabilities, Stream, check_app
from tether.schedulers.replica import with_recovery_env
from tether.specs import (
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    Role,
    SpecError,
    StructuredOpts,
    runopts,
    validate,
)
from tether.specs.states import is_terminal
from tether.workspace.api import Workspace, WorkspaceMixin

if TYPE_CHECKING:
    from datetime import datetime

    from typing_extensions import TypeVar as DefaultedTypeVar  # a default (PEP 696) on 3.11

    from tether.specs.failures import Failure
    from tether.specs.status import RoleStatus

JOB_KEY = "tether.job_key"
"""``AppDef.metadata`` key holding the caller's stable job identity (see module docs)."""

NONE = "<NONE>"

T = TypeVar("T")
"""The native request type of a scheduler (``AppDryRunInfo[T].request``)."""

if TYPE_CHECKING:
    OptsT = DefaultedTypeVar("OptsT", bound=Mapping[str, Any], default=Any)
else:  # typing_extensions costs milliseconds of every start: Scheduler applies the default
    OptsT = TypeVar("OptsT", bound=Mapping[str, Any])
"""The run options a scheduler's ``_validate`` and ``_submit_dryrun`` receive: its
:class:`StructuredOpts` dataclass, or the resolved cfg mapping for a scheduler that declares
none (a TorchX-style plugin written as ``Scheduler[Request]``; the default ``Any`` also keeps
``Scheduler[Any]`` a type that every backend is)."""


@dataclass
class DescribeAppResponse:
    """What a scheduler knows of an app.

    Attributes:
        app_id: The app's id.
        state: Its state.
        num_restarts: Restarts so far (-1 if unknown).
        msg: Human-readable detail (the native reason on failure).
        structured_error_msg: A JSON error document, when there is one.
        ui_url: Link to the scheduler's UI.
        metadata: Scheduler-specific facts about the app (as TorchX's).
        roles_statuses: Per-replica statuses.
        roles: The roles, rebuilt from the native objects where possible.
        job_key: The job identity the app was submitted with, if any.
        actions_due: :meth:`Scheduler.reconcile` has work to do for the app (a restart or a
            stop it planned); followers call it on such a change rather than on every poll.
        failure: Why the app failed (cause and native reason), when the backend tells it
            at the app's level; otherwise it is derived from ``roles_statuses``.
    """

    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)
    job_key: str | None = None
    actions_due: bool = False
    failure: Failure | None = None


@dataclass
class ListAppResponse:
    """One app in a listing.

    Attributes:
        app_id: The app's id.
        state: Its state.
        app_handle: The handle (filled by the Runner).
        name: The app's name, when known.
        job_key: The job identity, when the app has one.
        created: Submission time (seconds since the epoch), when known.
    """

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""
    job_key: str | None = None
    created: float | None = None


class Scheduler(abc.ABC, Generic[T, OptsT]):
    """A backend that runs AppDefs. Implement the abstract methods; see the module docs.

    A backend declares its options class once, as the second type parameter
    (``class KubernetesScheduler(Scheduler[KubernetesRequest, KubernetesOpts])``): the base
    class then derives ``runopts`` from it, resolves the user's cfg into it once per
    :meth:`submit_dryrun`, and hands the typed object to :meth:`_validate` and
    :meth:`_submit_dryrun`.

    Args:
        backend: The scheduler's registered name (``local_cwd``, ``kubernetes``...).
        session_name: The runner's session, part of every app handle.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(needs_image=False)
    """What this backend supports; the Runner, the CLI and the adapters read only this. A
    plugin that declares nothing gets the defaults, except that it is not taken to need an
    image (as in TorchX, where an empty image is the plugin's own business)."""

    opts_type: ClassVar[type[StructuredOpts] | None] = None
    """The options class named by the second type parameter (None when it names none);
    set by :meth:`__init_subclass__`, never by hand."""

    if not TYPE_CHECKING:  # a type checker reads the default from OptsT itself

        def __class_getitem__(cls, params):
            """``Scheduler[Request]`` is ``Scheduler[Request, Any]`` (OptsT's default, which
            ``typing`` applies by itself from Python 3.13 on)."""
            if cls is Scheduler and not isinstance(params, tuple):
                params = (params, Any)
            return super().__class_getitem__(params)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = typing.get_origin(base)
            if not (isinstance(origin, type) and issubclass(origin, Scheduler)):
                continue
            args = typing.get_args(base)
            opts = args[1] if len(args) > 1 else None
            if isinstance(opts, type) and issubclass(opts, StructuredOpts):
                cls.opts_type = opts

    def __init__(self, backend: str, session_name: str) -> None:
        self.backend = backend
        self.session_name = session_name

    # ---- options ---------------------------------------------------------------------
    def run_opts(self) -> runopts:
        """The run options this scheduler accepts (its ``--help`` for ``-cfg``).

        Returns:
            The options, including workspace options where the scheduler builds workspaces.
        """
        opts = self._run_opts()
        if isinstance(self, WorkspaceMixin):
            opts.update(self.workspace_opts())
        return opts

    def _run_opts(self) -> runopts:
        opts_cls = type(self).opts_type
        return opts_cls.as_runopts() if opts_cls is not None else runopts()

    def resolve_opts(self, cfg: Mapping[str, CfgVal] | None) -> OptsT:
        """Checks the user's run options, fills in defaults and types them.

        Args:
            cfg: Run options as a user gives them (``-cfg``, ``.tetherconfig``, a dict), or
                an options object this scheduler already resolved (returned as is).

        Returns:
            The backend's options object (the resolved mapping for a scheduler that declares
            no options class).

        Raises:
            InvalidRunConfigException: For an unknown option (with close matches), a missing
                required one, or a value of the wrong type.
        """
        opts_cls = type(self).opts_type
        if opts_cls is not None and isinstance(cfg, opts_cls):
            return cast(OptsT, cfg)
        resolved = self.run_opts().resolve(cfg or {}, self.backend)
        return cast(OptsT, opts_cls.from_resolved(resolved) if opts_cls is not None else resolved)

    # ---- render and submit -----------------------------------------------------------
    def submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[Any]:
        """Renders the native request for ``app`` without submitting anything.

        Args:
            app: The app (validated here).
            cfg: Run options (validated and defaulted here).

        Returns:
            The request, ready for :meth:`schedule`.

        Raises:
            ValueError: For an invalid app or options.
        """
        opts = self.resolve_opts(cfg)
        for role in app.roles:
            role.resolve_overrides()
        validate(app)
        check_app(app, self.capabilities, self.backend)
        self._validate(app, self.backend, opts)
        info = self._submit_dryrun(with_recovery_env(app), opts)
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info.app = app
        info.cfg = opts
        info.scheduler = self.backend
        return info

    @abc.abstractmethod
    def _submit_dryrun(self, app: AppDef, cfg: OptsT) -> AppDryRunInfo[Any]:
        """Renders the native request (pure: no side effects).

        Args:
            app: The app (validated).
            cfg: The resolved, typed run options (see :meth:`resolve_opts`).
        """

    def _validate(self, app: AppDef, scheduler: str, cfg: OptsT) -> None:
        """Backend-specific checks (TorchX's signature); raise ValueError naming role and field.

        The default, as TorchX's, rejects a role without a resource (``NULL_RESOURCE``)
        unless the backend runs on this host (it then uses what the host has). Overrides
        replace it; call ``super()._validate(...)`` to keep it.

        Args:
            app: The app.
            scheduler: The scheduler's backend name.
            cfg: The resolved, typed run options (see :meth:`resolve_opts`).

        Raises:
            SpecError: For a role without a resource (a ``ValueError``).
        """
        if self.capabilities.runs_on_this_host:
            return
        for role in app.roles:
            if role.resource == NULL_RESOURCE:
                raise SpecError(
                    f"No resource for role: {role.image}. Did you forget to attach resource "
                    f"to the role? (role {role.name!r} has resource=NULL_RESOURCE; give it "
                    "a Resource or a named resource such as specs.resource(h='gpu.small'))"
                )

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Submits a rendered request.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id.
        """

    def submit(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgVal],
        workspace: Workspace | str | None = None,
    ) -> str:
        """Renders and submits in one call (prefer the Runner, which also tracks and reattaches).

        Args:
            app: The app (not modified).
            cfg: Run options.
            workspace: A workspace (or ``--workspace`` string) for roles that have none; built
                when this scheduler builds workspaces.

        Returns:
            The app id.
        """
        if workspace is not None:
            app = copy.deepcopy(app)
            ws = Workspace.from_str(workspace) if isinstance(workspace, str) else workspace
            for role in app.roles:
                if role.workspace is None:
                    role.workspace = ws
            if isinstance(self, WorkspaceMixin):
                self.build_workspaces(app.roles, self.resolve_opts(cfg))
        return self.schedule(self.submit_dryrun(app, cfg))

    # ---- query -----------------------------------------------------------------------
    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app, or returns None when it does not exist."""

    @abc.abstractmethod
    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """Lists the apps this scheduler knows of (launched by tether)."""

    def exists(self, app_id: str) -> bool:
        """Whether the app exists.

        Args:
            app_id: The app id.

        Returns:
            True if the scheduler knows it.
        """
        return self.describe(app_id) is not None

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The apps submitted with job identity ``job_key``, oldest first.

        The default scans :meth:`list`; backends with a native query (a label selector, a tag
        filter) override it.

        Args:
            job_key: The identity.
            cfg: The run options the job was submitted with (where to look: a backend whose
                options say where its jobs are, such as Slurm's ``transport``, looks there).

        Returns:
            Matching apps, oldest first.
        """
        found = [a for a in self.list(cfg) if a.job_key == job_key]
        return sorted(found, key=lambda a: a.created or 0.0)

    def wait_for_change(self, app_id: str, timeout: float) -> None:
        """Blocks until the app may have changed state, or ``timeout`` seconds pass.

        The default sleeps; backends that can observe completion directly (``local_cwd``
        watches its supervisor process) return as soon as it happens.

        Args:
            app_id: The app.
            timeout: The longest wait, in seconds.
        """
        time.sleep(max(timeout, 0.0))

    # ---- retries tether applies -------------------------------------------------------
    def reconcile(self, app_id: str) -> None:
        """Applies what the engine cannot do itself; the one place where tether changes a job.

        Where a backend lacks a retry policy natively (see
        :attr:`Capabilities.reconciled_retries`) or must clean up after a dead controller, this
        step restarts or finishes what is due. It is idempotent and safe to call from two
        watchers at once; the local supervisor, :meth:`tether.runner.Runner.wait` and the
        adapters' pollers call it. ``describe``, ``list`` and ``log_iter`` never change
        anything. The default does nothing.

        Args:
            app_id: The app.
        """

    # ---- logs ------------------------------------------------------------------------
    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of ``role_name``; each line ends with ``\\n``.

        Args:
            app_id: The app.
            role_name: The role.
            k: The replica index.
            regex: Only lines matching this regular expression.
            since: Only lines at or after this time (where the backend has timestamps).
            until: Only lines before this time.
            should_tail: Follow the log until the replica finishes.
            streams: stdout, stderr or combined (default combined).

        Returns:
            An iterator of lines.

        Raises:
            ValueError: When the stream is not supported by this scheduler, or the role or
                replica does not exist.
        """
        caps = self.capabilities
        stream = Stream(streams) if streams is not None else Stream.COMBINED
        if stream not in caps.streams:
            raise ValueError(
                f"scheduler {self.backend!r} cannot return the {stream.value!r} stream; "
                f"supported: {sorted(s.value for s in caps.streams)}"
            )
        if (since is not None or until is not None) and not caps.log_time_filter:
            raise ValueError(f"scheduler {self.backend!r} cannot select log lines by time")
        if should_tail and not caps.log_tail:
            raise ValueError(f"scheduler {self.backend!r} cannot follow a live log")
        return self._log_iter(app_id, role_name, k, regex, since, until, should_tail, stream)

    def _log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int,
        regex: str | None,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
        streams: Stream,
    ) -> Iterable[str]:
        """Backend log reading (stream already checked).

        A scheduler without logs leaves this as is; a TorchX-style plugin may instead
        override :meth:`log_iter` itself.

        Raises:
            NotImplementedError: By default.
        """
        raise NotImplementedError(f"scheduler {self.backend!r} does not return logs")

    # ---- secrets ---------------------------------------------------------------------
    def put_secret(self, name: str, values: Mapping[str, str], cfg: Mapping[str, CfgVal]) -> None:
        """Stores values as a secret this backend holds (see :meth:`Runner.put_secret`).

        Args:
            name: The secret's name.
            values: Key to value.
            cfg: Resolved run options.

        Raises:
            NotImplementedError: The default: this backend holds no secrets.
        """
        raise NotImplementedError(
            f"the {self.backend} scheduler cannot hold secrets for a job; give the job a "
            "SecretRef to a secret the backend already has"
        )

    def delete_secret(self, name: str, cfg: Mapping[str, CfgVal]) -> None:
        """Deletes a secret made by :meth:`put_secret` (idempotent).

        Args:
            name: The secret's name.
            cfg: Resolved run options.
        """
        raise NotImplementedError(f"the {self.backend} scheduler cannot hold secrets")

    # ---- stop ------------------------------------------------------------------------
    def cancel(self, app_id: str) -> None:
        """Cancels the app. Idempotent: a finished or unknown app is left alone.

        Args:
            app_id: The app.
        """
        desc = self.describe(app_id)
        if desc is None or is_terminal(desc.state):
            return
        self._cancel_existing(app_id)

    @abc.abstractmethod
    def _cancel_existing(self, app_id: str) -> None:
        """Cancels an app that exists and is not finished."""

    def delete(self, app_id: str) -> None:
        """Cancels the app if needed and removes everything tether created for it. Idempotent.

        Args:
            app_id: The app.
        """
        if self.describe(app_id) is None:
            return
        self.cancel(app_id)
        self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        """Removes the app's objects/records (backends with state override this)."""

    def close(self) -> None:
        """Releases local resources. Safe to call more than once."""


def filter_regex(regex: str | None, lines: Iterable[str]) -> Iterator[str]:
    """Keeps the lines that match ``regex`` (all lines when it is None).

    Args:
        regex: A regular expression.
        lines: Lines.

    Yields:
        The matching lines.
    """
    if not regex:
        yield from lines
        return
    pat = re.compile(regex)
    for line in lines:
        if pat.search(line):
            yield line


def split_lines(text: str) -> list[str]:
    """Splits text into lines that keep their ``\\n``, as TorchX: a last line without one
    stays without one (``"a\\nb"`` -> ``["a\\n", "b"]``).

    Args:
        text: The text.

    Returns:
        The lines.
    """
    # not str.splitlines: it also splits on \r, \v, \x1c...; only \n ends a line here
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def split_lines_iterator(chunks: Iterable[str]) -> Iterator[str]:
    """Splits each chunk into lines (see :func:`split_lines`) and yields them in order.

    A chunk's last line is yielded as it is, without joining it to the next chunk.

    Args:
        chunks: Text chunks, e.g. what a log API returns page by page.

    Yields:
        Lines.
    """
    for chunk in chunks:
        yield from split_lines(chunk)
