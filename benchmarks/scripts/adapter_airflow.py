"""Parse time of an Airflow DAG of N tether operators vs N BashOperators (one process).

Usage: python adapter_airflow.py --n 200 --work DIR
Prints one JSON line: ``{"tether": s, "native": s, "note": ...}``.

What is timed per DAG file is what Airflow's DAG processor does with it: executing the file
(its imports included: ``tether.adapters.airflow`` for one, the standard provider's
``BashOperator`` for the other) and serializing the DAG. ``airflow.sdk`` and the serializer
are loaded and warmed on a two-task DAG before either is timed, as in a running DAG
processor. Note: Airflow imports ``tether.adapters.airflow`` itself when it loads the
provider's extra link, so in a deployment that import is usually paid already. Both DAGs
have the same shape: N tasks in chains of ten, each with two templated arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

TETHER_DAG = '''
import datetime as dt
from airflow.sdk import DAG, chain
from tether.adapters.airflow import ComponentOperator

with DAG("bench_tether", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
    ops = [
        ComponentOperator(
            task_id=f"t{i}",
            component="dist.ddp",
            component_args={"script": "train.py", "j": "1x2",
                            "script_args": ["--lr", "{{ params.lr }}", "--shard", str(i)]},
            env={"RUN": "{{ run_id }}"},
            scheduler="local_cwd",
        )
        for i in range(N)
    ]
    for k in range(0, N, 10):
        chain(*ops[k:k + 10])
'''

NATIVE_DAG = '''
import datetime as dt
from airflow.sdk import DAG, chain
from airflow.providers.standard.operators.bash import BashOperator

with DAG("bench_bash", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
    ops = [
        BashOperator(
            task_id=f"t{i}",
            bash_command="torchrun --nproc_per_node 2 train.py --lr {{ params.lr }} --shard "
            + str(i),
            env={"RUN": "{{ run_id }}"},
        )
        for i in range(N)
    ]
    for k in range(0, N, 10):
        chain(*ops[k:k + 10])
'''


WARMUP_DAG = '''
import datetime as dt
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("bench_warmup", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
    EmptyOperator(task_id="a") >> EmptyOperator(task_id="b")
'''


def parse(path: Path, name: str) -> tuple[float, int]:
    """Seconds to execute a DAG file and serialize its DAG, and the number of its tasks."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    started = time.perf_counter()
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dags = [v for v in vars(module).values() if isinstance(v, DAG)]
    for dag in dags:
        DagSerialization.to_dict(dag)
    elapsed = time.perf_counter() - started
    assert len(dags) == 1
    return elapsed, len(dags[0].tasks)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    work = args.work / "airflow-parse"
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AIRFLOW_HOME", str(work / "home"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    tether_file = work / "bench_tether_dag.py"
    native_file = work / "bench_bash_dag.py"
    tether_file.write_text(f"N = {args.n}\n" + TETHER_DAG)
    native_file.write_text(f"N = {args.n}\n" + NATIVE_DAG)

    # what the DAG processor has loaded and warm before it parses a file
    import airflow.sdk
    import airflow.serialization.serialized_objects  # noqa: F401

    warm = work / "bench_warmup_dag.py"
    warm.write_text(WARMUP_DAG)
    parse(warm, "bench_warmup_dag")

    native, native_tasks = parse(native_file, "bench_bash_dag")
    tether, tether_tasks = parse(tether_file, "bench_tether_dag")
    print(json.dumps({
        "tether": tether,
        "native": native,
        "tasks": {"tether": tether_tasks, "native": native_tasks},
        "note": f"exec + serialize of a {args.n}-task DAG file, imports of each side included",
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
