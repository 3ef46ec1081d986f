"""One cell of the portability matrix: the two-component pipeline through one adapter.

Run in its own process (each orchestrator configures itself once per process)::

    python -m tests.e2e.matrix.cells ADAPTER --workdir DIR

with ``MATRIX_SCHEDULER`` and ``MATRIX_CFG`` (JSON run options) in the environment, plus
what the backend needs (``KUBECONFIG``...). Prints ``RESULT {"shout": ...}`` when the
pipeline finished, or ``ERROR <reason>`` and exits 1.

No ``from __future__ import annotations``: KFP reads the pipeline's real annotations.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPONENTS = "tests.e2e.matrix.components"
HERE = Path(__file__).resolve().parent


def _scheduler() -> tuple[str, dict[str, Any]]:
    return os.environ["MATRIX_SCHEDULER"], json.loads(os.environ.get("MATRIX_CFG", "{}"))


def run_runner(workdir: Path) -> str:
    """The Runner API: run, wait, read the outputs, run the next."""
    from tests.e2e.matrix.components import TEXT, consume, produce
    from tether.runner import get_runner
    from tether.specs import AppState

    scheduler, cfg = _scheduler()
    with get_runner() as runner:
        first = runner.run(produce(TEXT), scheduler, cfg)
        st = runner.wait(first, wait_interval=0.5, timeout=300)
        if st is None or st.state != AppState.SUCCEEDED:
            raise RuntimeError(f"produce ended {st}")
        message = runner.outputs(first)["message"]
        second = runner.run(consume(message), scheduler, cfg)
        st = runner.wait(second, wait_interval=0.5, timeout=300)
        if st is None or st.state != AppState.SUCCEEDED:
            raise RuntimeError(f"consume ended {st}")
        return str(runner.outputs(second)["shout"])


def run_cli(workdir: Path) -> str:
    """``tether run --wait`` for each component; the output read with ``Runner.outputs``."""
    from tether.runner import get_runner

    scheduler, cfg = _scheduler()

    def tether_run(component: str, *args: str) -> str:
        argv = [sys.executable, "-m", "tether.cli.main", "run", "-s", scheduler, "--wait"]
        if cfg:
            argv += ["-cfg", ",".join(f"{k}={v}" for k, v in cfg.items())]
        argv += [f"{COMPONENTS}:{component}", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[3:])} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout.splitlines()[0].strip()  # the handle comes first

    first = tether_run("produce", "--text", "portable")
    with get_runner() as runner:
        message = runner.outputs(first)["message"]
    second = tether_run("consume", "--message", str(message))
    with get_runner() as runner:
        return str(runner.outputs(second)["shout"])


def run_airflow(workdir: Path) -> str:
    """Airflow 3 ``dag.test()`` of ``dags/tether_matrix_dag.py`` (sqlite metadata DB)."""
    home, dags = workdir / "airflow", workdir / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    (dags / "tether_matrix_dag.py").symlink_to(HERE / "dags" / "tether_matrix_dag.py")
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    })  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout}\n{proc.stderr}")
    from tests.adapters.airflow.airflow_testlib import get_dag, task_states, xcoms

    dag = get_dag("tether_matrix", dags / "tether_matrix_dag.py", fresh=True)
    dag_run = dag.test()
    states = task_states(dag_run)
    if str(dag_run.state) != "success":
        raise RuntimeError(f"DAG run {dag_run.state}: tasks {states}")
    return str(xcoms("tether_matrix", dag_run.run_id, "consume")["shout"])


def run_prefect(workdir: Path) -> str:
    """A Prefect 3 flow of two ``component_task`` calls against a real Prefect API server.

    The server is ``$PREFECT_API_URL`` (the test session's), else one started here.
    """
    from tests.e2e.infra.prefect import prefect_env, start_server

    if os.environ.get("PREFECT_API_URL"):
        try:
            return _prefect_flow(workdir)
        finally:
            _drain_prefect()
    server = start_server(workdir / "prefect-server")
    try:
        os.environ.update(prefect_env(workdir / "prefect", server.api_url))
        return _prefect_flow(workdir)
    finally:
        _drain_prefect()
        server.stop()


def _drain_prefect() -> None:
    """Sends the logs and events Prefect still queues before its server goes away."""
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=5)


def _prefect_flow(workdir: Path) -> str:
    from prefect import flow

    from tether.adapters.prefect import component_task

    scheduler, cfg = _scheduler()
    produce = component_task(f"{COMPONENTS}:produce", scheduler, cfg, poll_interval=0.5)
    consume = component_task(f"{COMPONENTS}:consume", scheduler, cfg, poll_interval=0.5)

    @flow(name="tether-matrix")
    def pipeline() -> str:
        first = produce(text="portable")
        second = consume(message=first.outputs["message"])
        return str(second.outputs["shout"])

    return str(pipeline())


def run_kfp(workdir: Path) -> str:
    """KFP v2 launcher steps run by ``kfp.local.SubprocessRunner``."""
    from kfp import dsl, local

    from tether.adapters.kfp import LauncherOptions, step

    scheduler, cfg = _scheduler()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(workdir / "kfp"))
    fast = LauncherOptions(wait_interval=0.5, cancel_grace=10.0)
    produce = step(f"{COMPONENTS}:produce", scheduler=scheduler, cfg=cfg, mode="launcher",
                   launcher=fast, outputs={"message": str})  # fmt: skip
    consume = step(f"{COMPONENTS}:consume", scheduler=scheduler, cfg=cfg, mode="launcher",
                   launcher=fast, outputs={"shout": str})  # fmt: skip

    @dsl.pipeline(name="tether-matrix")
    def pipeline(text: str = "portable") -> str:
        first = produce(text=text)
        second = consume(message=first.outputs["message"])
        return second.outputs["shout"]

    return str(pipeline().output)


ADAPTERS: dict[str, Callable[[Path], str]] = {
    "cli": run_cli,
    "runner": run_runner,
    "airflow": run_airflow,
    "prefect": run_prefect,
    "kfp": run_kfp,
}


def main() -> int:
    """Runs one cell (see the module docs)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("adapter", choices=sorted(ADAPTERS))
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        shout = ADAPTERS[args.adapter](args.workdir)
    except Exception as e:
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"ERROR {type(e).__name__}: {first}"[:300], flush=True)
        return 1
    print("RESULT " + json.dumps({"shout": shout}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
