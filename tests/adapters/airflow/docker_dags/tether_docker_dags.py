"""DAGs whose jobs run on ``local_docker`` (busybox containers on a private podman).

Kept apart from ``dags/`` so that the other Airflow tests never parse them; the engine comes
from ``$DOCKER_HOST``, set by the test's podman fixture.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG

from tether.adapters.airflow import ComponentOperator

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
IMAGE = "localhost/bb:latest"

with DAG("tether_docker_ok", schedule=None, start_date=START, catchup=False) as ok_dag:
    ComponentOperator(
        task_id="two_containers",
        component="utils.sh",
        component_args={"args": ["echo \"hello from $TETHER_REPLICA_ID on $(hostname)\""],
                        "num_replicas": 2, "image": IMAGE, "memMB": 64},
        scheduler="local_docker",
        deferrable=False,
        wait_interval=0.2,
    )

with DAG("tether_docker_fail", schedule=None, start_date=START, catchup=False) as fail_dag:
    ComponentOperator(
        task_id="broken",
        component="utils.sh",
        component_args={"args": ["echo 'disk full' >&2; exit 3"], "image": IMAGE, "memMB": 64},
        scheduler="local_docker",
        deferrable=False,
        wait_interval=0.2,
    )
