"""Slurm's accounting over slurmrestd: the ``slurmdb`` API's job records as tether's apps.

slurmrestd serves the accounting database (slurmdbd) under ``/slurmdb/<version>/`` when it
loads the ``openapi/dbv0.0.3x`` plugins. A job record there has the fields ``sacct`` prints,
nested: ``state.current``, ``state.reason``, ``comment.job`` (tether's marker, stored with
``AccountingStoreFlags=job_comment``), ``het.job_id`` and ``het.job_offset`` (the components
of a heterogeneous job), ``working_directory``, ``time.submission``, ``kill_request_user``.

One flaw of slurmrestd 22.05 is handled here: its ``slurmdb`` API reports every job's
``exit_code`` as ``SUCCESS``/0 (``sacct`` says ``3:0`` for the same job), so an exit code of 0
on a job that did not complete is taken as unknown rather than shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.schedulers.slurm.render import parse_comment
from tether.schedulers.slurm.status import Component, SlurmApp, analyze, base_state


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _leader(job: Mapping[str, Any]) -> tuple[str, int]:
    """(the app's job id, this record's component offset)."""
    het = _dict(job.get("het"))
    lead = _int(het.get("job_id"))
    if lead:  # a component of a heterogeneous job
        return str(lead), _int(het.get("job_offset")) or 0
    return str(job.get("job_id")), 0


def _component(job: Mapping[str, Any], offset: int) -> Component:
    state = _dict(job.get("state"))
    current = base_state(state.get("current"))
    reason = str(state.get("reason") or "")
    code = _dict(job.get("exit_code"))
    rc = _int(code.get("return_code"))
    if rc == 0 and current != "COMPLETED":  # slurmrestd 22.05 says 0 for every job
        rc = None
    signal = _dict(code.get("signal"))
    by = str(job.get("kill_request_user") or "") if current == "CANCELLED" else ""
    return Component(
        job_id=str(job.get("job_id")), offset=offset, state=current,
        reason="" if reason == "None" else reason, exit_code=rc,
        signal=_int(signal.get("signal_id") or signal.get("id")) or None,
        nodes=str(job.get("nodes") or ""), by=by,
    )  # fmt: skip


def from_slurmdb(jobs: Sequence[Mapping[str, Any]]) -> list[SlurmApp]:
    """tether's apps among ``slurmdb`` job records (jobs without the marker are skipped).

    Args:
        jobs: The ``jobs`` array of ``GET /slurmdb/<version>/jobs`` or ``.../job/<id>``.

    Returns:
        One view per app, oldest first.
    """
    grouped: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for job in jobs:
        app_id, offset = _leader(job)
        grouped.setdefault(app_id, []).append((offset, job))
    apps: list[SlurmApp] = []
    for app_id, records in grouped.items():
        records.sort(key=lambda r: r[0])
        lead = records[0][1]
        comment = lead.get("comment")
        text = comment.get("job") if isinstance(comment, dict) else comment
        marker = parse_comment(str(text or ""))
        if marker is None:
            continue
        times = _dict(lead.get("time"))
        apps.append(
            analyze(
                app_id, str(lead.get("name") or ""), marker,
                [_component(job, offset) for offset, job in records],
                job_dir=str(lead.get("working_directory") or ""),
                created=float(_int(times.get("submission")) or 0) or None,
            )
        )  # fmt: skip
    return sorted(
        apps, key=lambda a: (a.created or 0.0, int(a.app_id) if a.app_id.isdigit() else 0)
    )
