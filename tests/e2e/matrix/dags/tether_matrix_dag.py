"""The portability pipeline as an Airflow DAG (scheduler and run options from the environment).

``MATRIX_SCHEDULER`` and ``MATRIX_CFG`` (JSON) are set by ``tests/e2e/matrix/cells.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os

from airflow.sdk import DAG

from tether.adapters.airflow import ComponentOperator

COMPONENTS = "tests.e2e.matrix.components"
SCHEDULER = os.environ.get("MATRIX_SCHEDULER", "local_cwd")
CFG = json.loads(os.environ.get("MATRIX_CFG", "{}"))

with DAG("tether_matrix", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
    produce = ComponentOperator(
        task_id="produce", component=f"{COMPONENTS}:produce", component_args={"text": "portable"},
        scheduler=SCHEDULER, cfg=CFG, wait_interval=0.5,
    )  # fmt: skip
    consume = ComponentOperator(
        task_id="consume", component=f"{COMPONENTS}:consume",
        component_args={"message": produce.output["message"]},  # type: ignore[index]
        scheduler=SCHEDULER, cfg=CFG, wait_interval=0.5,
    )  # fmt: skip
