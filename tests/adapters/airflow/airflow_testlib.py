"""Helpers of the Airflow adapter tests: run a DAG for real, read its XComs and task states.

Also a command line, so a test can run a DAG in its own process (and kill it)::

    python airflow_testlib.py DAG_ID --conf '{"seconds": 5}' --when 2024-05-01T00:00:00+00:00

prints ``RESULT {"state": ..., "run_id": ...}`` when the run ends.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEST_DAGS = HERE / "dags" / "tether_test_dags.py"
REPO = HERE.parent.parent.parent
EXAMPLE_DAGS = REPO / "dags"

_modules: dict[Path, Any] = {}


def load_module(path: Path, fresh: bool = False) -> Any:
    """Imports a DAG file (once per path unless ``fresh``) and returns the module."""
    path = path.resolve()
    if fresh or path not in _modules:
        spec = importlib.util.spec_from_file_location(f"tether_dagfile_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[path] = module
    return _modules[path]


def get_dag(dag_id: str, path: Path = TEST_DAGS, fresh: bool = False) -> Any:
    """A DAG object of a DAG file (``fresh``: from a new import of the file)."""
    from airflow.sdk import DAG

    module = load_module(path, fresh)
    for value in vars(module).values():
        if isinstance(value, DAG) and value.dag_id == dag_id:
            return value
    raise KeyError(f"no DAG {dag_id!r} in {path}")


def run_id_for(when: dt.datetime) -> str:
    """The run id ``dag.test(logical_date=when, run_after=when)`` gives its DAG run."""
    return f"manual__{when.isoformat()}"


def run_dag(dag_id: str, conf: dict[str, Any] | None = None, when: dt.datetime | None = None,
            path: Path = TEST_DAGS) -> Any:
    """Runs one DAG run to its end with ``dag.test()`` and returns the DagRun.

    Args:
        dag_id: The DAG.
        conf: Run conf (DAG param values).
        when: Logical date and run_after (fixed: the run id is then known in advance, and a
            second call continues the same DAG run).
        path: The DAG file.
    """
    # a fresh DAG object per run, as a worker parses the file anew: dag.test() runs tasks in
    # this process, and Airflow updates the DAG's params with the run conf in place
    dag = get_dag(dag_id, path, fresh=True)
    when = when or dt.datetime.now(dt.timezone.utc)
    return dag.test(run_conf=conf, logical_date=when, run_after=when)


def _dag_run(session: Any, dag_id: str, run_id: str) -> Any:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    dr = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    assert dr is not None, f"no DAG run {dag_id}/{run_id}"
    return dr


def clear_tasks(dag_id: str, run_id: str, task_ids: list[str]) -> None:
    """Clears task instances of a DAG run as the UI's Clear does (Airflow's own function)."""
    from airflow import settings
    from airflow.models.taskinstance import clear_task_instances

    session = settings.Session()
    try:
        dr = _dag_run(session, dag_id, run_id)
        tis = [ti for ti in dr.get_task_instances(session=session) if ti.task_id in task_ids]
        clear_task_instances(tis, session)
        session.commit()
    finally:
        session.close()


def fail_for_retry(dag_id: str, run_id: str, task_id: str) -> None:
    """What the scheduler does to a running task whose worker died (no heartbeat): the try
    fails and, with retries left, the task instance is up for retry."""
    from airflow import settings
    from airflow.utils.state import TaskInstanceState

    session = settings.Session()
    try:
        dr = _dag_run(session, dag_id, run_id)
        (ti,) = [t for t in dr.get_task_instances(session=session) if t.task_id == task_id]
        ti.state = TaskInstanceState.UP_FOR_RETRY
        ti.end_date = dt.datetime.now(dt.timezone.utc)
        session.commit()
    finally:
        session.close()


def continue_run(dag_id: str, run_id: str, path: Path = TEST_DAGS) -> Any:
    """Runs an existing DAG run on to its end, with the loop of ``dag.test()``.

    ``dag.test()`` deletes an existing run with the same logical date; a cleared or retried
    task instance keeps its DAG run (and its ``task_state_store``), so this runs the tasks the
    way ``dag.test()`` does without replacing the run.
    """
    from airflow import settings
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils import timezone
    from airflow.utils.state import DagRunState, TaskInstanceState

    dag = get_dag(dag_id, path, fresh=True)
    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    session = settings.Session()
    dr = _dag_run(session, dag_id, run_id)
    dr.dag = scheduler_dag
    dr.state = DagRunState.RUNNING
    session.commit()
    while dr.state == DagRunState.RUNNING:
        session.expire_all()
        schedulable, _ = dr.update_state(session=session)
        for ti in schedulable:
            if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
                ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
            ti.scheduled_dttm = timezone.utcnow()
        session.commit()
        for ti in [t for t in dr.get_task_instances(session=session)
                   if t.state == TaskInstanceState.SCHEDULED]:
            # dag.test() logs a task's exception and goes on: the task's state tells
            with contextlib.suppress(Exception):
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
    return dr


def task_states(dag_run: Any) -> dict[str, str]:
    """Task id (``task[map_index]`` for mapped ones) to its final state."""
    out: dict[str, str] = {}
    for ti in dag_run.get_task_instances():
        name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        out[name] = str(ti.state.value if hasattr(ti.state, "value") else ti.state)
    return out


def try_numbers(dag_run: Any) -> dict[str, int]:
    """Task id to its try number."""
    return {ti.task_id: ti.try_number for ti in dag_run.get_task_instances()}


def xcoms(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
    """Every XCom of one task instance, deserialized."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == map_index,
            )
        ).scalars().all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def main() -> int:
    """Runs a DAG of the test DAG file in this process (see the module docs)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("dag_id")
    parser.add_argument("--conf", default="{}")
    parser.add_argument("--when", required=True)
    parser.add_argument("--file", default=str(TEST_DAGS))
    args = parser.parse_args()
    when = dt.datetime.fromisoformat(args.when)
    print(f"PID {os.getpid()}", flush=True)
    dr = run_dag(args.dag_id, json.loads(args.conf), when, Path(args.file))
    print("RESULT " + json.dumps({"state": str(dr.state), "run_id": dr.run_id,
                                  "tasks": task_states(dr)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
