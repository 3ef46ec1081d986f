"""Airflow 3 adapter: tether components as Airflow operators.

* :class:`ComponentOperator`: one component, one task (submit-or-attach, logs, XComs,
  deferrable, cancellation on kill).
* :func:`operator_for`, :func:`component_chain`, :func:`step`, :func:`output_of`: less
  boilerplate for typed tasks and whole branches.
* :class:`~tether.adapters.airflow.trigger.TetherJobTrigger`: what deferred tasks wait on.
* :mod:`tether.adapters.airflow.dryrun`: both layers of a task, without running it.

Names are imported on first use (PEP 562), so Airflow's providers manager, which imports
:mod:`tether.adapters.airflow.provider` in every Airflow process, loads nothing else of
tether; a DAG file that imports the operator gets ``airflow.sdk`` (it does anyway) but no
scheduler backend: jobs are built and submitted only when a task runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from tether.adapters.airflow.trigger import TetherJobTrigger

_WHERE = {
    "ComponentTask": "factory",
    "Step": "factory",
    "component_chain": "factory",
    "operator_for": "factory",
    "output_of": "factory",
    "step": "factory",
    "XCOM_APP_HANDLE": "links",
    "XCOM_STATE": "links",
    "XCOM_UI_URL": "links",
    "TetherJobLink": "links",
    "DEFAULT_SCHEDULER": "operator",
    "ComponentOperator": "operator",
    "dag_run_parent_id": "operator",
    "task_job_key": "operator",
    "TetherJobTrigger": "trigger",
}

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
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
