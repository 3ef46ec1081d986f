"""Example DAG: one training job on Kubernetes, with a cluster connection, secrets and cleanup.

* ``conn_id="training_cluster"``: the cluster comes from an Airflow Connection of type
  ``tether_kubernetes`` (kubeconfig file or inline, in-cluster, context, namespace)::

      export AIRFLOW_CONN_TRAINING_CLUSTER='{"conn_type": "tether_kubernetes",
          "extra": {"kubeconfig": "/etc/kube/training.yaml", "namespace": "ml"}}'

* ``secret_env``: the warehouse password comes from a Connection when the task runs; the task
  stores it in a Kubernetes Secret, the pods read it through ``secretKeyRef``, and the Secret
  is deleted when the job is done. It never appears in the Job spec, a dry-run or the log.
* ``cfg`` ``env_from``: every key of the existing Secret ``hf-token`` and ConfigMap
  ``train-settings`` becomes an environment variable of the pods.
* ``on_finish_action="delete_succeeded"``: a job that succeeded is deleted once the task has
  recorded its result; a failed one is kept for inspection.
* ``dashboard_url``: the task's "Tether Job" link opens the job in your dashboard.
* ``reattach="auto"``: a retry after a worker crash, or a clear while the job runs,
  re-attaches to the running job; a clear after it finished runs it anew.

See what it would submit (no cluster needed; Connections and Variables show as
placeholders)::

    python -m tether.adapters.airflow.dryrun dags/tether_kubernetes_secrets.py
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from tether.adapters.airflow import ComponentOperator

with DAG(
    "tether_kubernetes_secrets",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={
        "image": Param("ghcr.io/acme/train:1.0", type="string"),
        "namespace": Param("ml", type="string"),
    },
    tags=["tether", "example"],
) as dag:
    ComponentOperator(
        task_id="train",
        component="utils.python",
        component_args={
            "m": "train",
            "args": ["--table", "{{ var.value.get('training_table', 'events') }}"],
        },
        image="{{ params.image }}",
        scheduler="kubernetes",
        conn_id="training_cluster",
        cfg={
            "namespace": "{{ params.namespace }}",
            "env_from": ["secret:hf-token", "configmap:train-settings"],
            "dashboard_url": "https://k8s-dashboard.example/#/job/{namespace}/{name}",
        },
        env={"WAREHOUSE_HOST": "{{ conn.warehouse.host }}"},
        secret_env={"WAREHOUSE_PASSWORD": "{{ conn.warehouse.password }}"},
        on_finish_action="delete_succeeded",
        reattach="auto",
        retries=2,
        retry_delay=dt.timedelta(minutes=1),
        execution_timeout=dt.timedelta(hours=4),
        deferrable=True,
    )
