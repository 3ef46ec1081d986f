"""Airflow 3 adapter: tether components as Airflow operators.

* :class:`ComponentOperator`: one component, one task (submit-or-attach, logs, XComs,
  deferrable, cancellation on kill).
* :func:`operator_for`, :func:`component_chain`, :func:`step`, :func:`output_of`: less
  boilerplate for typed tasks and whole branches.
* :class:`~tether.adapters.airflow.trigger.TetherJobTrigger`: what deferred tasks wait on
  (imported on first use: it pulls in Airflow's trigger machinery).
* :mod:`tether.adapters.airflow.dryrun`: both layers of a task, without running it.

Importing this package imports ``airflow.sdk`` (a DAG file does anyway) but no scheduler
backend: jobs are built and submitted only when a task runs.
"""

from typing import TYPE_CHECKING, Any

from tether.adapters.airflow.factory import (
    ComponentTask,
    Step,
    component_chain,
    operator_for,
    output_of,
    step,
)
from tether.adapters.airflow.links import (
    XCOM_APP_HANDLE,
    XCOM_STATE,
    XCOM_UI_URL,
    TetherJobLink,
)
from tether.adapters.airflow.operator import (
    DEFAULT_SCHEDULER,
    ComponentOperator,
    dag_run_parent_id,
    task_job_key,
)

if TYPE_CHECKING:
    from tether.adapters.airflow.trigger import TetherJobTrigger

__all__ = [
    "DEFAULT_SCHEDULER",
    "XCOM_APP_HANDLE",
    "XCOM_STATE",
    "XCOM_UI_URL",
    "ComponentOperator",
    "ComponentTask",
    "Step",
    "TetherJobLink",
    "TetherJobTrigger",
    "component_chain",
    "dag_run_parent_id",
    "operator_for",
    "output_of",
    "step",
    "task_job_key",
]


def __getattr__(name: str) -> Any:
    if name == "TetherJobTrigger":
        from tether.adapters.airflow.trigger import TetherJobTrigger

        return TetherJobTrigger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
