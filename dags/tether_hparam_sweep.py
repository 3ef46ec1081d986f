"""Example DAG: a hyper-parameter sweep with dynamic task mapping, one tether job per trial.

``make_trials`` turns the ``learning_rates`` param into one argument dict per trial at run
time; ``train`` is mapped over them (``ComponentOperator.partial(...).expand(...)``), so each
trial is its own task instance (``train[0]``, ``train[1]``...) with its own job, its own
retries and its own job identity (the map index is part of it). ``report`` collects the
trials' states and outputs::

    airflow dags trigger tether_hparam_sweep -c '{"learning_rates": [0.1, 0.03, 0.01]}'

The same sweep with literal values fixed when the DAG is parsed reads
``operator_for(...).expand(lr=[0.1, 0.01])`` (see ``tether.adapters.airflow.factory``).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, XComArg, task

from tether.adapters.airflow import ComponentOperator

APPS = Path(
    os.environ.get("TETHER_EXAMPLES_DIR")
    or Path(__file__).resolve().parent.parent / "examples" / "apps"
)

with DAG(
    dag_id="tether_hparam_sweep",
    description="one DDP training job per learning rate (dynamic task mapping)",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["tether", "example"],
    params={
        "learning_rates": Param([0.1, 0.01], type="array", items={"type": "number"},
                                minItems=1),
        "epochs": Param(2, type="integer", minimum=1),
        "nproc": Param(1, type="integer", minimum=1),
        "scheduler": Param("local_cwd", type="string"),
    },
) as dag:

    @task
    def make_trials(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One ``dist.ddp`` argument dict per learning rate."""
        assert params is not None
        return [
            {
                "script": str(APPS / "train_ddp.py"),
                "j": f"1x{params['nproc']}",
                "name": f"/sweep-lr{lr}",
                "script_args": ["--lr", str(lr), "--epochs", str(params["epochs"]),
                                "--samples", "512"],
            }
            for lr in params["learning_rates"]
        ]

    train = ComponentOperator.partial(
        task_id="train",
        component="dist.ddp",
        scheduler="{{ params.scheduler }}",
        wait_interval=2.0,
        retries=1,
        retry_delay=dt.timedelta(seconds=30),
    ).expand(component_args=make_trials())

    @task
    def report(states: Any, outputs: Any) -> dict[str, Any]:
        """The sweep's summary: each trial's final state and published outputs.

        ``states`` and ``outputs`` are the mapped task's per-trial XComs (lists at run time;
        XComArgs while the DAG is built, hence ``Any``).
        """
        trials = [{"state": s, "outputs": o} for s, o in zip(states, outputs)]
        print(f"sweep finished: {trials}")
        return {"trials": trials, "succeeded": sum(t["state"] == "SUCCEEDED" for t in trials)}

    # every trial's "state" XCom, and its return value (the job's published outputs)
    report(XComArg(train, key="state"), XComArg(train))
