"""Logical handles (``chain://<session>/<app name>-<digest>``) and failover lists' options.

Only what a Runner or a dry-run needs before it meets a logical job lives here (the test of a
handle, each candidate's run options), so that the machinery of :mod:`tether.runner.chains`
loads when one is met.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tether.errors import SpecError
from tether.specs.handles import AppHandle, MalformedAppHandleException, parse_app_handle
from tether.specs.runopts import CfgVal, runopts

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
