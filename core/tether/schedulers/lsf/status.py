"""The one table from LSF job states to :class:`~tether.specs.AppState`, and the parsers of
``bsub``'s and ``bjobs -json``'s output (formats as IBM documents them)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import BackendError
from tether.specs import AppState

JOB_STATE: dict[str, AppState] = {
    "PEND": AppState.PENDING,
    "WAIT": AppState.PENDING,
    "PSUSP": AppState.PENDING,
    "RUN": AppState.RUNNING,
    "USUSP": AppState.RUNNING,
    "SSUSP": AppState.RUNNING,
    "PROV": AppState.PENDING,
    "DONE": AppState.SUCCEEDED,
    "EXIT": AppState.FAILED,
    "UNKWN": AppState.UNKNOWN,
    "ZOMBI": AppState.UNKNOWN,
}
"""``bjobs`` STAT -> state. An EXIT whose exit reason says the owner or an administrator
killed it (``bkill``) is CANCELLED."""

APP_STATE_ORDER = (AppState.FAILED, AppState.CANCELLED)
"""When every job of an app has ended, the first of these that a job ended in is the app's
state (a failed role fails the app, even though its script then ends the other roles' jobs,
which read CANCELLED); else SUCCEEDED."""

KILLED_REASONS = ("TERM_OWNER", "TERM_ADMIN", "killed by owner", "killed by admin")

_SUBMITTED = re.compile(r"Job <(\d+)> is submitted")

BJOBS_FIELDS = (
    "jobid", "stat", "exit_code", "exit_reason", "job_name", "job_description",
    "submit_time", "pend_reason", "exec_host",
)
"""The columns tether asks ``bjobs -o`` for."""


class LsfOutputError(BackendError):
    """An LSF command printed something tether cannot read."""

    backend, kind = "lsf", "output"


@dataclass
class LsfJob:
    """One row of ``bjobs -json``.

    Attributes:
        job_id: The LSF job id.
        stat: The LSF state (PEND, RUN, DONE, EXIT...).
        name: The job name.
        description: The job description (tether's identity of the app).
        exit_code: The exit code, when finished.
        reason: The exit or pending reason.
        submit_time: As LSF prints it.
        exec_host: The execution hosts.
    """

    job_id: str
    stat: str
    name: str = ""
    description: str = ""
    exit_code: int | None = None
    reason: str = ""
    submit_time: str = ""
    exec_host: str = ""

    @property
    def state(self) -> AppState:
        """The tether state (see :data:`JOB_STATE`)."""
        state = JOB_STATE.get(self.stat, AppState.UNKNOWN)
        if state == AppState.FAILED and any(k in self.reason for k in KILLED_REASONS):
            return AppState.CANCELLED
        return state


def aggregate(states: Sequence[AppState], missing: bool = False) -> AppState:
    """The state of an app from the states of its roles' jobs.

    UNKNOWN when any job's state is; once every job has ended, see :data:`APP_STATE_ORDER`
    (a role without a job, its submission interrupted, makes the ended app FAILED); else
    RUNNING while any job runs, PENDING before.

    Args:
        states: The state of each job of the app.
        missing: Whether a role of the app has no job.

    Returns:
        The app's state.
    """
    if not states or AppState.UNKNOWN in states:
        return AppState.UNKNOWN
    if all(s.is_terminal() for s in states):
        for s in APP_STATE_ORDER:
            if s in states:
                return s
        return AppState.FAILED if missing else AppState.SUCCEEDED
    return AppState.RUNNING if AppState.RUNNING in states else AppState.PENDING


def parse_submit(out: str) -> str:
    """The job id from ``bsub``'s ``Job <1234> is submitted to queue <normal>.``.

    Args:
        out: bsub's output.

    Returns:
        The job id.

    Raises:
        LsfOutputError: When there is none.
    """
    m = _SUBMITTED.search(out)
    if m is None:
        raise LsfOutputError(f"bsub printed no job id: {out.strip()[:500]!r}")
    return m.group(1)


def _int_or_none(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except ValueError:
        return None


def parse_bjobs(out: str) -> list[LsfJob]:
    """Rows of ``bjobs -o "<fields>" -json``; records with ``ERROR`` (unknown jobs) are skipped.

    Args:
        out: bjobs's output.

    Returns:
        The jobs.

    Raises:
        LsfOutputError: When the output is not bjobs's JSON.
    """
    try:
        doc = json.loads(out)
    except ValueError as e:
        raise LsfOutputError(f"bjobs printed no JSON: {out.strip()[:500]!r}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("RECORDS", []), list):
        raise LsfOutputError(f"bjobs JSON has no RECORDS list: {out.strip()[:500]!r}")
    jobs: list[LsfJob] = []
    for rec in doc.get("RECORDS", []):
        if not isinstance(rec, dict) or rec.get("ERROR") or not rec.get("JOBID"):
            continue
        stat = str(rec.get("STAT", ""))
        reason = str(rec.get("EXIT_REASON") or "") if stat == "EXIT" else str(
            rec.get("PEND_REASON") or "")
        jobs.append(
            LsfJob(
                job_id=str(rec["JOBID"]),
                stat=stat,
                name=str(rec.get("JOB_NAME", "")),
                description=str(rec.get("JOB_DESCRIPTION", "")),
                exit_code=_int_or_none(rec.get("EXIT_CODE", "")),
                reason=reason.strip(),
                submit_time=str(rec.get("SUBMIT_TIME", "")),
                exec_host=str(rec.get("EXEC_HOST", "")),
            )
        )
    return jobs
