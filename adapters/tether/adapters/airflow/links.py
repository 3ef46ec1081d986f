"""The operator extra link and the XComs a tether task shows while its job runs.

The link is a button on the task that opens the job in its scheduler's UI. Airflow 3 records
an operator's links (as the XCom ``_link_<class>``) only when the task's process ends or
defers, so a task that follows its job in the worker pushes that XCom itself as soon as the
job has a UI URL (:func:`publish_link`): the button works while the job runs. Each new
progress report of the job replaces the XCom ``tether_progress`` as it comes
(:func:`progress_value`), from the worker or, for a deferred task, the triggerer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import RuntimeTaskInstanceProtocol, TaskInstanceKey

    from tether.tracker.progress import Progress

XCOM_APP_HANDLE = "app_handle"
"""XCom key of the job's app handle (pushed right after submission)."""

XCOM_STATE = "state"
"""XCom key of the job's final state (``SUCCEEDED``, ``FAILED``...)."""

XCOM_UI_URL = "ui_url"
"""XCom key of the job's UI URL (None when the scheduler has no UI)."""

XCOM_PROGRESS = "tether_progress"
"""XCom key of the job's latest progress report (``tether.runtime.report``): replaced by each
new report while the job runs, the last one when the task ends."""

RESERVED_XCOM_KEYS = frozenset({XCOM_APP_HANDLE, XCOM_STATE, XCOM_UI_URL, XCOM_PROGRESS})


class TetherJobLink(BaseOperatorLink):
    """Links a tether task to its job's UI (the scheduler's ``ui_url``).

    The worker records the link when the task finishes; the URL comes from the operator
    (set while the task ran) or, when the operator did not read the job's status in this
    process, from the task's ``ui_url`` XCom (not read otherwise: a missing XCom is logged
    as an error in the task log).
    """

    name = "Tether Job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The job's UI URL, or an empty string when there is none.

        Args:
            operator: The task's operator.
            ti_key: The task instance.

        Returns:
            The URL.
        """
        url: Any = getattr(operator, "job_ui_url", None)
        if not url and not getattr(operator, "job_ui_url_known", False):
            from airflow.sdk.execution_time.xcom import XCom

            try:
                url = XCom.get_value(ti_key=ti_key, key=XCOM_UI_URL)
            except Exception:  # no XCom backend reachable (e.g. outside a task)
                url = None
        return str(url) if url else ""


def publish_link(ti: RuntimeTaskInstanceProtocol, url: str | None) -> None:
    """Records the job's UI URL as the task's link now, not only when the task ends.

    Args:
        ti: The running task instance.
        url: The job's UI URL (nothing is recorded without one).
    """
    if url:
        ti.xcom_push(key=TetherJobLink().xcom_key, value=url)


def progress_value(progress: Progress) -> dict[str, Any]:
    """The ``tether_progress`` XCom of a report: ``Progress.to_dict()`` plus its one-line
    form (``text``: ``3/10 (30%) loss=0.33 eta 12s``)."""
    return {**progress.to_dict(), "text": progress.format()}
