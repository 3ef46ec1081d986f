"""The train pipeline on Kubeflow Pipelines v2: prepare -> DDP train -> evaluate.

The same three apps as the Airflow DAG and the Prefect flow (``examples/apps/``), as tether
components turned into KFP steps with :func:`tether.adapters.kfp.step`:

* **prepare** (``utils.python``) writes a synthetic data set and publishes ``data_dir``,
  ``samples``, ``features`` and ``seed``, which become the step's output parameters;
* **train** (``dist.ddp``, ``nnodes x nproc_per_node`` from ``j``) trains on the same
  problem (prepare's ``features`` and ``seed`` outputs are wired into its arguments) and
  writes ``model.pt`` to ``model_dir``;
* **evaluate** (``utils.python``) scores the model on prepare's evaluation split (its
  ``data_dir`` output) and publishes ``mse`` and ``passed``; the pipeline returns ``mse``.

All three are launcher steps (they declare outputs, and train has several replicas): the
step runs tether, which submits the job to ``$TETHER_KFP_SCHEDULER`` (default
``kubernetes``; any other installed scheduler works the same way), streams every replica's log
into the step's log and cancels the job if the run is terminated. On a cluster the job image
(``$TETHER_EXAMPLE_IMAGE``) must contain ``examples/apps`` and the directories must be on
storage every job sees.

Compile it::

    python -m tether.adapters.kfp.compile examples/pipelines/kfp_train.py:train_pipeline \\
        build/kfp_train.yaml

Run it here, without a cluster (kfp.local runs the steps as subprocesses, the jobs run on
``local_cwd``)::

    python examples/pipelines/kfp_train.py --local --workdir /tmp/tether-kfp-train

No ``from __future__ import annotations``: KFP reads the pipeline's parameter types from real
annotations.
"""

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from kfp import dsl

from tether.adapters.kfp import LauncherOptions, step

SCHEDULER = os.environ.get("TETHER_KFP_SCHEDULER", "kubernetes")
IMAGE = os.environ.get("TETHER_EXAMPLE_IMAGE", "ghcr.io/tether-ml/tether:latest")
APPS = "examples/apps"


def make_pipeline(scheduler: str = SCHEDULER, image: str = IMAGE,
                  launcher: LauncherOptions | None = None) -> Any:
    """Builds the pipeline for one scheduler.

    Args:
        scheduler: Where the three jobs run.
        image: The jobs' image (ignored by ``local_cwd``).
        launcher: How the launcher steps run (their image, poll interval...).

    Returns:
        The ``@dsl.pipeline``.
    """
    prepare = step("utils.python", scheduler=scheduler, image=image, name="prepare",
                   launcher=launcher,
                   # str: they go into the train job's command line
                   outputs={"data_dir": str, "samples": int, "features": str, "seed": str})
    # launcher: the number of nodes and processes (j) is a pipeline parameter
    train = step("dist.ddp", scheduler=scheduler, image=image, name="train", launcher=launcher,
                 mode="launcher")
    evaluate = step("utils.python", scheduler=scheduler, image=image, name="evaluate",
                    launcher=launcher, outputs={"mse": float, "passed": bool})

    @dsl.pipeline(name="tether-train",
                  description="prepare -> DDP train -> evaluate, each a tether job")
    def train_pipeline(
        data_dir: str = "/mnt/shared/tether-train/data",
        model_dir: str = "/mnt/shared/tether-train/model",
        j: str = "1x2",
        epochs: str = "3",
        max_mse: str = "0.05",
    ) -> float:
        prepared = prepare(script=f"{APPS}/prepare_data.py", args=["--data-dir", data_dir])
        trained = train(
            script=f"{APPS}/train_ddp.py", j=j, cpu=1,
            script_args=["--features", prepared.outputs["features"],
                         "--seed", prepared.outputs["seed"],
                         "--epochs", epochs, "--model-dir", model_dir],
        )
        scored = evaluate(
            script=f"{APPS}/evaluate.py",
            args=["--data-dir", prepared.outputs["data_dir"], "--model-dir", model_dir,
                  "--max-mse", max_mse],
        )
        scored.after(trained)
        return scored.outputs["mse"]

    return train_pipeline


train_pipeline = make_pipeline()


def run_locally(workdir: str, j: str = "1x2") -> float:
    """Runs the pipeline here: kfp.local's SubprocessRunner, jobs on ``local_cwd``.

    The jobs' ``python`` is this interpreter (its directory goes first on ``PATH``), so they
    see the same packages (torch, tether).

    Args:
        workdir: Where the data set, the model and the KFP outputs go.
        j: ``nnodes x nproc_per_node`` of the training job.

    Returns:
        The evaluation's mean squared error.
    """
    from kfp import local

    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
    local.init(runner=local.SubprocessRunner(use_venv=False),
               pipeline_root=os.path.join(workdir, "kfp"))
    pipeline = make_pipeline("local_cwd", image="",
                             launcher=LauncherOptions(wait_interval=0.5))
    task = pipeline(data_dir=os.path.join(workdir, "data"),
                    model_dir=os.path.join(workdir, "model"), j=j)
    return float(task.output)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--local`` runs the pipeline here.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--local", action="store_true", help="run with kfp.local on local_cwd")
    p.add_argument("--workdir", default=None, help="directory for data, model and outputs")
    p.add_argument("-j", default="1x2", help="nnodes x nproc_per_node of the training job")
    ns = p.parse_args(argv)
    if not ns.local:
        p.error("nothing to do: pass --local, or compile with "
                "`python -m tether.adapters.kfp.compile examples/pipelines/kfp_train.py:"
                "train_pipeline out.yaml`")
    workdir = ns.workdir or tempfile.mkdtemp(prefix="tether-kfp-train-")
    mse = run_locally(workdir, ns.j)
    print(f"evaluation mse: {mse:.6f} (workdir {workdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
