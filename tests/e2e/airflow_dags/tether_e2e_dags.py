"""DAGs of the Airflow end-to-end tests (tests/e2e/test_airflow_scheduler_e2e.py).

Each job is a shell loop on the ``local_cwd`` scheduler: it prints ``tick N`` once a second
until a *gate* file exists (the test creates it), then publishes an output. Each task waits
on its own gate, ``<params.gate>/<task_id>``, so a test decides when each job ends. The job
also prints the password of the connection ``tether_e2e_db`` (a secret: Airflow must mask it
in the task log).
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys

from airflow.sdk import DAG, Param

from tether.adapters.airflow import ComponentOperator

PY = shlex.quote(sys.executable)
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
PARAMS = {"gate": Param("/nonexistent", type="string"),
          "seconds": Param(600, type="integer")}

PUBLISH = PY + " -c " + shlex.quote(
    "import os; from tether.tracker.outputs import write_output; "
    "write_output('try', os.environ['TETHER_AIRFLOW_TRY_NUMBER'])"
)
GATED = (
    "echo \"started by try $TETHER_AIRFLOW_TRY_NUMBER\"; "
    "echo \"password is $DB_PASSWORD\"; "
    "i=0; while [ ! -e '{{ params.gate }}/{{ ti.task_id }}' ] "
    "&& [ $i -lt {{ params.seconds }} ]; do i=$((i+1)); echo \"tick $i\"; sleep 1; done; "
    "echo finished; " + PUBLISH
)
SECRET_ENV = {"DB_PASSWORD": "{{ conn.tether_e2e_db.password }}"}
PROGRESS = PY + " -c " + shlex.quote(
    "import os, sys, time; from tether.runtime import report; "
    "report(step=1, total=4, loss=0.5); "
    "end = time.monotonic() + int(sys.argv[2]); "
    "[time.sleep(0.2) for _ in iter(lambda: os.path.exists(sys.argv[1]) "
    "or time.monotonic() > end, True)]; "
    "report(step=4, total=4, loss=0.125)"
) + " '{{ params.gate }}/{{ ti.task_id }}' {{ params.seconds }}"


def gated(task_id: str, deferrable: bool, **kwargs: object) -> ComponentOperator:
    """A task whose job runs until its gate file exists."""
    return ComponentOperator(
        task_id=task_id, component="utils.sh", component_args=[GATED], env=SECRET_ENV,
        deferrable=deferrable, wait_interval=1.0, **kwargs,  # type: ignore[arg-type]
    )


with DAG("tether_e2e_quick", schedule=None, start_date=START, catchup=False):
    ComponentOperator(
        task_id="quick", component="utils.sh",
        component_args=["echo \"run by try $TETHER_AIRFLOW_TRY_NUMBER\"; " + PUBLISH],
        deferrable=False, wait_interval=0.5,
    )

with DAG("tether_e2e_gate", schedule=None, start_date=START, catchup=False, params=PARAMS):
    gated("sync", deferrable=False)
    gated("deferred", deferrable=True)

with DAG("tether_e2e_kill", schedule=None, start_date=START, catchup=False, params=PARAMS):
    # the test kills the task's process 10 times: each kill uses a retry
    gated("victim", deferrable=False, retries=22, retry_delay=dt.timedelta(seconds=0))

with DAG("tether_e2e_timeout", schedule=None, start_date=START, catchup=False, params=PARAMS):
    gated("sync", deferrable=False, execution_timeout=dt.timedelta(seconds=25))
    gated("deferred", deferrable=True, execution_timeout=dt.timedelta(seconds=25))

with DAG("tether_e2e_progress", schedule=None, start_date=START, catchup=False,
         params=PARAMS):
    # the job reports 1/4, waits for its gate, reports 4/4 (tether.runtime.report)
    for _task_id, _deferrable in (("sync", False), ("deferred", True)):
        ComponentOperator(task_id=_task_id, component="utils.sh", component_args=[PROGRESS],
                          deferrable=_deferrable, wait_interval=1.0)

with DAG("tether_e2e_slurm", schedule=None, start_date=START, catchup=False):
    # the cluster (its slurm.conf) and the partition come from the connection, which the test
    # creates through the REST API
    ComponentOperator(
        task_id="on_slurm", component="utils.sh",
        component_args=["echo \"slurm job $SLURM_JOB_ID on $SLURM_JOB_PARTITION\""],
        scheduler="slurm", conn_id="tether_e2e_slurm", deferrable=False, wait_interval=1.0,
    )
