"""A step's schedulers: one name, or an ordered failover list, checked before anything runs.

An orchestrator step (an Airflow task, a Prefect task, a KFP step) names where its job runs
as ``tether run -s`` does: one scheduler, or several in the order to try
(``["kubernetes", "local_cwd"]`` or ``"kubernetes,local_cwd"``). With several, the job runs
as one logical job that moves to the next candidate when one refuses it for capacity (see
``docs/recovery.md``). :func:`check_candidates` refuses, before anything is submitted, an
unknown scheduler (with close matches), run options a candidate would not accept (each
candidate gets the options it declares, and an option none declares is an error) and a
candidate without a capability the step's app needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tether.errors import SpecError
from tether.runner import Runner
from tether.specs import AppDef, CfgVal, runopts


class SchedulerListError(SpecError):
    """A step's ``scheduler`` or ``cfg`` that no candidate scheduler could run."""


def _where(step: str | None) -> str:
    return f"{step}: " if step else ""


def scheduler_list(value: object, step: str | None = None) -> list[str]:
    """The schedulers a step names, in the order to try.

    Args:
        value: One name, a comma-separated string of names, or a list of names.
        step: The step, named in errors (e.g. ``task 'train'``).

    Returns:
        The names (at least one).

    Raises:
        SchedulerListError: For anything else, or no name.
    """
    if isinstance(value, str):
        names = [s.strip() for s in value.split(",") if s.strip()]
    elif isinstance(value, Sequence) and all(isinstance(s, str) and s.strip() for s in value):
        names = [s.strip() for s in value]
    else:
        names = []
    if not names:
        raise SchedulerListError(
            f"{_where(step)}scheduler: {value!r} names no scheduler; give one name, or the "
            "schedulers to try in order, e.g. ['kubernetes', 'local_cwd']"
        )
    return names


def union_opts(runner: Runner, schedulers: Sequence[str]) -> runopts:
    """Every candidate's run options (an option's type is the first declaring candidate's).

    Args:
        runner: The runner.
        schedulers: The candidates.

    Returns:
        The options.

    Raises:
        KeyError: For an unknown scheduler (``UnknownSchedulerError``, with close matches).
    """
    if len(schedulers) == 1:
        return runner.scheduler_run_opts(schedulers[0])
    union = runopts()
    for sched in reversed(schedulers):  # the first candidate's declaration wins
        union.update(runner.scheduler_run_opts(sched))
    return union


def check_candidates(
    runner: Runner,
    schedulers: Sequence[str],
    cfg: Mapping[str, CfgVal],
    step: str | None = None,
    app: AppDef | None = None,
) -> None:
    """Refuses schedulers and run options the step's job could not be submitted with.

    Every candidate must be known; with several, every option must be declared by one of
    them, each candidate must accept the options it declares (their types, its required
    ones) and, given the app, have the capabilities it needs (``Runner.check_candidates``).
    One scheduler alone checks its options and the app when the job is submitted, as before.

    Args:
        runner: The runner.
        schedulers: The candidates, in order.
        cfg: The step's run options.
        step: The step, named in errors.
        app: The step's app, when it is built already.

    Raises:
        SchedulerListError: Naming the step, the field and what is allowed.
    """
    opts: dict[str, runopts] = {}
    for sched in schedulers:
        try:
            opts[sched] = runner.scheduler_run_opts(sched)
        except KeyError as e:
            msg = e.args[0] if e.args else str(e)
            raise SchedulerListError(f"{_where(step)}scheduler: {msg}") from e
    if len(schedulers) == 1:
        return
    for key in cfg:
        if all(o.get(key) is None for o in opts.values()):
            raise SchedulerListError(
                f"{_where(step)}cfg: run option {key!r} is not an option of any of the "
                f"schedulers {', '.join(schedulers)} (`tether runopts SCHEDULER` lists each one's)"
            )
    for sched, own in opts.items():
        given = {k: v for k, v in cfg.items() if own.get(k) is not None}
        try:
            own.resolve(given, sched)
        except ValueError as e:
            raise SchedulerListError(f"{_where(step)}cfg: {e}") from e
    if app is not None:
        try:
            runner.check_candidates(app, schedulers)
        except SpecError as e:  # its message starts with the field: ``scheduler: ...``
            raise SchedulerListError(f"{_where(step)}{e}") from e
