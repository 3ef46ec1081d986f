"""The DAG of ``benchmarks/watch_airflow_bench.py``: N deferred tether tasks on Kubernetes.

Each task submits one Kubernetes job (``sleep``; its pod stays Pending on the benchmark's
apiserver, which has no kubelet) and defers: the triggerer then follows N jobs at once. N,
the namespace and whether the triggers stream the jobs' logs come from the environment the
benchmark starts Airflow with.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from tether.adapters.airflow import ComponentOperator

N = int(os.environ.get("TETHER_BENCH_N", "10"))
NAMESPACE = os.environ.get("TETHER_BENCH_NAMESPACE", "default")
STREAM_LOGS = os.environ.get("TETHER_BENCH_STREAM_LOGS", "1") == "1"

with DAG("tether_watch_bench", schedule=None, start_date=dt.datetime(2024, 1, 1),
         catchup=False, max_active_tasks=N):
    for i in range(N):
        ComponentOperator(
            task_id=f"job_{i:04d}", component="utils.sh", component_args=["sleep 3600"],
            scheduler="kubernetes", cfg={"namespace": NAMESPACE}, image="busybox:1.36",
            deferrable=True, wait_interval=5.0, stream_logs=STREAM_LOGS,
            # a busy machine can time out a worker's call to the api-server before the job
            # is submitted: the retry submits it (the job key makes it one job)
            retries=3, retry_delay=dt.timedelta(seconds=5),
        )
