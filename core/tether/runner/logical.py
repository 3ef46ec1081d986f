"""Logical handles (``chain://<session>/<app name>-<digest>``) and failover lists' checks:
each candidate's run options, and its capabilities against the app.

Only what a Runner or a dry-run needs before it meets a logical job lives here (the test of a
handle, each candidate's run options), so that the machinery of :mod:`tether.runner.chains`
loads when one is met.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tether.errors import SpecError
from tether.schedulers.capabilities import Capabilities, UnsupportedFeatureError, shortfalls
from tether.specs.app import AppDef
from tether.specs.handles import AppHandle, MalformedAppHandleException, parse_app_handle
from tether.specs.runopts import CfgVal, runopts

if TYPE_CHECKING:
    from tether.workspace import Workspace

CHAIN_SCHEME = "chain"
"""The scheme of a logical handle: ``chain://<session>/<app name>-<digest>``."""


def is_chain_handle(app_handle: AppHandle) -> bool:
    """Whether a handle is a logical job's (see :mod:`tether.runner.chains`).

    Args:
        app_handle: The handle.

    Returns:
        True for ``chain://...`` handles.
    """
    try:
        return parse_app_handle(app_handle).scheduler_backend == CHAIN_SCHEME
    except MalformedAppHandleException:
        return False


class UnknownRunOptionError(SpecError):
    """A run option that none of the candidate schedulers declares (or no candidate)."""


def candidate_cfg(
    run_opts: Callable[[str], runopts],
    schedulers: Sequence[str],
    cfg: Mapping[str, CfgVal] | None,
    scheduler: str,
) -> dict[str, CfgVal]:
    """The run options one candidate of a failover list gets: those it declares. With one
    candidate every option given is passed on unchanged, so that its own checks speak.

    Args:
        run_opts: A scheduler's run options by its name (``Runner.scheduler_run_opts``).
        schedulers: The candidates, in order.
        cfg: The options given once for all of them.
        scheduler: The candidate.

    Returns:
        Its options.

    Raises:
        UnknownRunOptionError: For an option no candidate declares.
    """
    given = dict(cfg or {})
    if len(schedulers) == 1:
        return given
    opts = {s: run_opts(s) for s in schedulers}
    for k in given:
        if all(o.get(k) is None for o in opts.values()):
            raise UnknownRunOptionError(
                f"run option {k!r} is not an option of any of the schedulers "
                f"{', '.join(schedulers)} (`tether runopts SCHEDULER` lists each one's)"
            )
    return {k: v for k, v in given.items() if opts[scheduler].get(k) is not None}


class CandidateCapabilityError(UnsupportedFeatureError):
    """A failover list naming a scheduler without a capability the app needs."""


def check_candidates_can_run(
    app: AppDef,
    schedulers: Sequence[str],
    capabilities: Callable[[str], Capabilities],
    workspace: Workspace | str | None = None,
) -> None:
    """Refuses a failover list with a candidate that could not run the app, before anything
    is submitted (a candidate is tried only after the ones before it refused the job, so
    its own dry-run would come too late). One scheduler alone is checked by its dry-run.

    Args:
        app: The app.
        schedulers: The candidates, in order.
        capabilities: A scheduler's capabilities by its name
            (``Runner.scheduler_capabilities``).
        workspace: The workspace given for roles that have none.

    Raises:
        CandidateCapabilityError: Naming the ``scheduler`` field, each candidate, the
            capability it lacks and what of the app needs it.
    """
    if len(schedulers) < 2:
        return
    if workspace is not None:
        from tether.workspace import Workspace

        ws = Workspace.from_str(workspace) if isinstance(workspace, str) else workspace
        roles = [r if r.workspace is not None else dataclasses.replace(r, workspace=ws)
                 for r in app.roles]  # fmt: skip
        app = dataclasses.replace(app, roles=roles)
    lines = [
        f"{sched} lacks the capability `{s.capability}`: {s.text}"
        for sched in schedulers
        for s in shortfalls(app, capabilities(sched), sched)
    ]
    if lines:
        raise CandidateCapabilityError(
            f"scheduler: the failover list {', '.join(schedulers)} names schedulers that cannot "
            f"run app {app.name!r} (drop them from the list, or change the app):\n  - "
            + "\n  - ".join(lines)
        )
