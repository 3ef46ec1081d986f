"""Example DAG: prepare data -> distributed training (``dist.ddp``) -> evaluate, with tether.

Each step is one tether job. By default every job runs on ``local_cwd`` (processes on the
worker's machine); the ``scheduler`` param switches the whole DAG to another scheduler
(``kubernetes``, or any other installed one) and ``cfg`` passes that scheduler's run options as
``tether run -cfg`` takes them (``namespace=ml,queue=gpu``)::

    airflow dags trigger tether_train_pipeline
    airflow dags trigger tether_train_pipeline \\
        -c '{"scheduler": "kubernetes", "cfg": "namespace=ml", "image": "ghcr.io/me/train:1"}'

Steps hand results on through the jobs' published outputs: ``prepare_data.py`` publishes
``data_dir``, ``features`` and ``seed``; the next steps read them with ``output_of``
(``train_ddp.py`` trains on the same synthetic problem, given by ``--features``/``--seed``,
and saves the model to ``--model-dir``; ``evaluate.py`` scores it on the prepared held-out
split). On a remote scheduler, point ``work_dir`` at storage every job can reach.

Copy this file into your DAGs folder and set ``TETHER_EXAMPLES_DIR`` (or edit ``APPS``) to
where the example apps live. See what a run would submit, without running it::

    python -m tether.adapters.airflow.dryrun dags/tether_train_pipeline.py
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from airflow.sdk import DAG, Param

from tether.adapters.airflow import component_chain, output_of, step

APPS = Path(
    os.environ.get("TETHER_EXAMPLES_DIR")
    or Path(__file__).resolve().parent.parent / "examples" / "apps"
)
RUN_DIR = "{{ params.work_dir }}/{{ run_id | replace(':', '_') | replace('+', '_') }}"
DATA_DIR = RUN_DIR + "/data"
MODEL_DIR = RUN_DIR + "/model"

with DAG(
    dag_id="tether_train_pipeline",
    description="prepare -> DDP training -> evaluate, as tether jobs on any scheduler",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["tether", "example"],
    params={
        "scheduler": Param("local_cwd", type="string",
                           description="the tether scheduler every step runs on"),
        "cfg": Param("", type="string", description="run options: k=v,k2=v2"),
        "image": Param("", type="string", description="container image (remote schedulers)"),
        "work_dir": Param("/tmp/tether-train-pipeline", type="string",
                          description="where the data and the model go (shared storage)"),
        "nproc": Param(2, type="integer", minimum=1, description="DDP workers per node"),
        "nnodes": Param(1, type="integer", minimum=1, description="DDP nodes"),
        "epochs": Param(3, type="integer", minimum=1),
        "max_mse": Param(1.0, type="number", description="evaluate fails above this"),
    },
) as dag:
    component_chain(
        step(
            "prepare",
            "utils.python",
            {"script": str(APPS / "prepare_data.py"),
             "args": ["--data-dir", DATA_DIR, "--samples", "1024"]},
        ),
        step(
            "train",
            "dist.ddp",
            {
                "script": str(APPS / "train_ddp.py"),
                "j": "{{ params.nnodes }}x{{ params.nproc }}",
                "script_args": [
                    "--epochs", "{{ params.epochs }}",
                    "--features", output_of("prepare", "features"),
                    "--seed", output_of("prepare", "seed"),
                    "--model-dir", MODEL_DIR,
                ],
            },
        ),
        step(
            "evaluate",
            "utils.python",
            {"script": str(APPS / "evaluate.py"),
             "args": ["--data-dir", output_of("prepare", "data_dir"),
                      "--model-dir", MODEL_DIR, "--max-mse", "{{ params.max_mse }}"]},
        ),
        scheduler="{{ params.scheduler }}",
        cfg="{{ params.cfg }}",
        image="{{ params.image }}",
        retries=1,
        retry_delay=dt.timedelta(seconds=30),
        wait_interval=2.0,
    )
