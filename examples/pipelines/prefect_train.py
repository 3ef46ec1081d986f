"""The train pipeline as a Prefect 3 flow: prepare -> DDP train -> evaluate.

The same three apps as the Airflow DAG and the KFP pipeline (``examples/apps/``), as tether
components turned into Prefect tasks with :func:`tether.adapters.prefect.component_task`:

* **prepare** (``utils.python``) writes a synthetic data set and publishes ``data_dir``,
  ``samples``, ``features`` and ``seed``: the task returns them in ``result.outputs``;
* **train** (``dist.ddp``, ``nnodes x nproc_per_node`` from ``-j``) trains on the same
  problem (prepare's ``features`` and ``seed`` go into its arguments) and writes
  ``model.pt`` to ``--model-dir`` (its ``model_dir`` output feeds evaluate); every
  replica's log lines land in the task run's logs;
* **evaluate** (``utils.python``) scores the model on prepare's evaluation split and
  publishes ``mse`` and ``passed``; with ``--max-mse`` a bad model fails the flow.

Each task submits one tether job and waits for it; a retry of a task re-attaches to its job
if that is still running, and cancelling the flow run (or a task timeout) cancels the job.
Each task run publishes a summary artifact (handle, scheduler, roles, replicas, final state).

Run it here, jobs on ``local_cwd`` (Prefect starts a temporary API server unless
``PREFECT_API_URL`` points at one)::

    python examples/pipelines/prefect_train.py --workdir /tmp/tether-prefect-train

Elsewhere: ``--scheduler kubernetes`` (or any other installed scheduler), an image holding
``examples/apps`` (``--image``) and directories on storage every job sees.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence

from prefect import Flow, flow

from tether.adapters.prefect import component_task

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APPS = os.environ.get("TETHER_EXAMPLE_APPS", os.path.join(REPO, "examples", "apps"))
SCHEDULER = os.environ.get("TETHER_PREFECT_SCHEDULER", "local_cwd")
IMAGE = os.environ.get("TETHER_EXAMPLE_IMAGE") or None


def make_flow(scheduler: str = SCHEDULER, image: str | None = IMAGE) -> Flow[..., float]:
    """Builds the flow for one scheduler.

    Args:
        scheduler: Where the three jobs run.
        image: The jobs' image (ignored by ``local_cwd``).

    Returns:
        The ``@flow``.
    """
    prepare = component_task("utils.python", scheduler=scheduler, image=image,
                             name="prepare", retries=1)
    train = component_task("dist.ddp", scheduler=scheduler, image=image, name="train",
                           retries=1, timeout_seconds=3600)
    evaluate = component_task("utils.python", scheduler=scheduler, image=image,
                              name="evaluate")

    @flow(name="tether-train", description="prepare -> DDP train -> evaluate, each a tether job")
    def train_pipeline(
        data_dir: str,
        model_dir: str,
        j: str = "1x2",
        epochs: int = 3,
        max_mse: float = 0.05,
    ) -> float:
        """Prepares data, trains with DDP and evaluates the model.

        Args:
            data_dir: Where the data set goes.
            model_dir: Where the model goes.
            j: ``nnodes x nproc_per_node`` of the training job.
            epochs: Training epochs.
            max_mse: Fail when the model's mean squared error is above this.

        Returns:
            The evaluation's mean squared error.
        """
        prepared = prepare("--data-dir", data_dir, script=f"{APPS}/prepare_data.py")
        data = prepared.outputs
        trained = train(
            "--features", str(data["features"]), "--seed", str(data["seed"]),
            "--epochs", str(epochs), "--model-dir", model_dir,
            script=f"{APPS}/train_ddp.py", j=j, cpu=1,
        )
        scored = evaluate(
            "--data-dir", data["data_dir"], "--model-dir", trained.outputs["model_dir"],
            "--max-mse", str(max_mse), script=f"{APPS}/evaluate.py",
        )
        return float(scored.outputs["mse"])

    return train_pipeline


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the flow once and prints the evaluation's mean squared error.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--workdir", default=None,
                        help="where the data and model go (default: a new temp directory)")
    parser.add_argument("-j", default="1x2", help="nnodes x nproc_per_node of training")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-mse", type=float, default=0.05)
    parser.add_argument("--scheduler", default=SCHEDULER)
    parser.add_argument("--image", default=IMAGE,
                        help="the jobs' image, holding examples/apps (not used by local_cwd)")
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tether-prefect-train-")
    if args.scheduler == "local_cwd":  # the jobs' `python` is this interpreter
        bindir = os.path.dirname(sys.executable)
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    pipeline = make_flow(args.scheduler, args.image)
    mse = pipeline(data_dir=os.path.join(workdir, "data"),
                   model_dir=os.path.join(workdir, "model"), j=args.j, epochs=args.epochs,
                   max_mse=args.max_mse)
    print(f"mse {mse:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
