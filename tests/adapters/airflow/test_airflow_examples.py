"""The example DAGs of ``dags/``: parsed, dry-run and run for real with ``dag.test()``."""

from __future__ import annotations

import datetime as dt
import importlib.util
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from airflow_testlib import (
    EXAMPLE_DAGS,
    REPO,
    get_dag,
    run_dag,
    task_states,
    try_numbers,
    xcoms,
)

from tether.adapters.airflow import ComponentOperator
from tether.adapters.airflow.dryrun import render_dag

PIPELINE = EXAMPLE_DAGS / "tether_train_pipeline.py"
SWEEP = EXAMPLE_DAGS / "tether_hparam_sweep.py"
TRAIN_APP = REPO / "examples" / "apps" / "train_ddp.py"


def _when() -> dt.datetime:
    return dt.datetime(2024, 7, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9
    )


def test_example_dags_import_without_errors(airflow_db: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLE_DAGS))
    assert bag.import_errors == {}
    assert {"tether_train_pipeline", "tether_hparam_sweep"} <= set(bag.dag_ids)
    pipeline = bag.get_dag("tether_train_pipeline")
    assert pipeline is not None
    assert [t.task_id for t in pipeline.topological_sort()] == ["prepare", "train", "evaluate"]


def test_pipeline_dryrun_shows_both_layers() -> None:
    dag = get_dag("tether_train_pipeline", PIPELINE)
    text = render_dag(dag, ["train"], params={"nproc": 3})
    # the operator layer: the task's rendered arguments
    assert "# Airflow task 'train' (operator layer)" in text
    assert '"scheduler": "local_cwd"' in text
    assert '"j": "1x3"' in text
    assert "<xcom prepare.features>" in text  # known only at run time
    # the scheduler layer: local_cwd's native request (the torchrun command per replica)
    assert "# local_cwd request (scheduler layer)" in text
    assert "torch.distributed.run" in text
    assert "--nproc_per_node 3" in text


def test_pipeline_dryrun_command_line_switches_scheduler() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether.adapters.airflow.dryrun", str(PIPELINE),
         "--task", "prepare", "-p", "scheduler=no_such_scheduler"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"scheduler": "no_such_scheduler"' in proc.stdout
    assert "# AppDef" in proc.stdout and "cannot materialize" not in proc.stdout
    request = proc.stdout.split("# no_such_scheduler request (scheduler layer)", 1)[1]
    assert "cannot render the request" in request
    assert "unknown scheduler 'no_such_scheduler'" in request and "local_cwd" in request
    bad = subprocess.run(
        [sys.executable, "-m", "tether.adapters.airflow.dryrun", str(PIPELINE), "--task", "trian"],
        capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 2
    assert "no tether task 'trian'" in bad.stderr and "train" in bad.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("tether.schedulers.kubernetes_scheduler") is None
    or importlib.util.find_spec("kubernetes") is None,
    reason="the kubernetes scheduler is not available",
)
def test_pipeline_dryrun_on_kubernetes_renders_a_manifest() -> None:
    dag = get_dag("tether_train_pipeline", PIPELINE)
    text = render_dag(dag, ["train"], params={"scheduler": "kubernetes", "image": "reg/img:1"})
    assert '"scheduler": "kubernetes"' in text
    request = text.split("# kubernetes request (scheduler layer)", 1)[1]
    assert "cannot render" not in request
    assert "reg/img:1" in request


def test_scheduler_param_switches_every_task() -> None:
    dag = get_dag("tether_train_pipeline", PIPELINE)
    tasks = [t for t in dag.tasks if isinstance(t, ComponentOperator)]
    assert len(tasks) == 3
    assert {t.scheduler for t in tasks} == {"{{ params.scheduler }}"}


@pytest.mark.usefixtures("airflow_db")
def test_pipeline_switched_to_an_unknown_scheduler_fails_clearly(
    capfd: pytest.CaptureFixture[str],
) -> None:
    dr = run_dag("tether_train_pipeline", conf={"scheduler": "nope"}, when=_when(), path=PIPELINE)
    text = "".join(capfd.readouterr())
    # bad input is not retried (the task has retries=1, retry_delay=30s)
    assert task_states(dr) == {"prepare": "failed", "train": "upstream_failed",
                               "evaluate": "upstream_failed"}
    assert try_numbers(dr)["prepare"] == 1  # not retried
    assert "AirflowFailException: task 'prepare': scheduler: unknown scheduler 'nope'" in text
    assert "local_cwd" in text  # the error lists the known schedulers


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.skipif(
    "--model-dir" not in TRAIN_APP.read_text(),
    reason="examples/apps/train_ddp.py does not take --model-dir yet",
)
def test_train_pipeline_runs_end_to_end(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    dr = run_dag(
        "tether_train_pipeline",
        conf={"work_dir": str(tmp_path), "epochs": 2, "nproc": 2},
        when=_when(), path=PIPELINE,
    )
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"prepare": "success", "train": "success", "evaluate": "success"}
    # both DDP workers' output reached the train task's log
    assert "[train_ddp0]" in text and "[train_ddp1]" in text
    prep = xcoms("tether_train_pipeline", dr.run_id, "prepare")["return_value"]
    assert prep["features"] == 16 and Path(prep["data_dir"]).is_dir()
    ev = xcoms("tether_train_pipeline", dr.run_id, "evaluate")["return_value"]
    assert ev["passed"] is True and ev["mse"] < 1.0


@pytest.mark.usefixtures("airflow_db")
def test_hparam_sweep_maps_one_job_per_learning_rate(capfd: pytest.CaptureFixture[str]) -> None:
    dr = run_dag(
        "tether_hparam_sweep", conf={"learning_rates": [0.1, 0.02], "epochs": 1},
        when=_when(), path=SWEEP,
    )
    text = "".join(capfd.readouterr())
    states = task_states(dr)
    assert states == {"make_trials": "success", "train[0]": "success", "train[1]": "success",
                      "report": "success"}, states
    handles = {xcoms("tether_hparam_sweep", dr.run_id, "train", i)["app_handle"] for i in (0, 1)}
    assert len(handles) == 2  # one job per map index
    assert "--lr 0.1" in text or "lr0.1" in text
    summary = xcoms("tether_hparam_sweep", dr.run_id, "report")["return_value"]
    assert summary["succeeded"] == 2


def test_kubernetes_example_dryrun_shows_references_not_secrets() -> None:
    dag = get_dag("tether_kubernetes_secrets", EXAMPLE_DAGS / "tether_kubernetes_secrets.py")
    text = render_dag(dag)
    assert "<var.value.get('training_table')>" in text and "<conn.warehouse.host>" in text
    assert '"WAREHOUSE_PASSWORD": "****"' in text
    assert "secretKeyRef" in text and "key: WAREHOUSE_PASSWORD" in text
    assert "configMapRef" in text and "name: train-settings" in text
    assert "tether.dev/ui-url: https://k8s-dashboard.example/#/job/ml/" in text
