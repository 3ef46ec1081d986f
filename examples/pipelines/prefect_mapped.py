"""A learning-rate sweep as a Prefect 3 flow: parallel tether jobs with ``.map()``.

prepare (one job) -> one DDP training job per learning rate (mapped, running in parallel)
-> one evaluation job per model (mapped) -> the best learning rate.

The trial and its scoring are components defined right here: typed functions returning an
AppDef (they wrap ``dist.ddp`` and ``utils.python``).
:func:`~tether.adapters.prefect.component_task` turns each into a task whose parameters are
the function's (``lr``, ``model_dir``, ...), so ``train.map(lr=[...], model_dir=[...])`` fans
out over them like any Prefect task. Each mapped task run is its own tether job with
its own identity, logs and summary artifact.

Run it here, jobs on ``local_cwd``::

    python examples/pipelines/prefect_mapped.py --workdir /tmp/tether-prefect-sweep \\
        --lr 0.01 0.05 0.2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence

from prefect import Flow, flow, unmapped

from tether.adapters.prefect import component_task
from tether.components import dist, utils
from tether.specs import AppDef

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APPS = os.environ.get("TETHER_EXAMPLE_APPS", os.path.join(REPO, "examples", "apps"))
SCHEDULER = os.environ.get("TETHER_PREFECT_SCHEDULER", "local_cwd")


def trial(lr: float, model_dir: str, features: int = 16, seed: int = 0, epochs: int = 2,
          j: str = "1x1") -> AppDef:
    """One trial of the sweep: DDP training of the example model at one learning rate.

    Args:
        lr: The learning rate.
        model_dir: Where this trial's model goes.
        features: Input features of the data set.
        seed: Seed of the data set.
        epochs: Training epochs.
        j: ``nnodes x nproc_per_node``.

    Returns:
        The AppDef.
    """
    return dist.ddp(
        "--lr", str(lr), "--features", str(features), "--seed", str(seed),
        "--epochs", str(epochs), "--model-dir", model_dir,
        script=f"{APPS}/train_ddp.py", j=j, cpu=1, name=f"sweep/lr-{lr}",
    )


def score(model_dir: str, data_dir: str) -> AppDef:
    """Evaluates one trial's model on the evaluation split.

    Args:
        model_dir: The trial's model.
        data_dir: The data set written by prepare.

    Returns:
        The AppDef.
    """
    return utils.python("--data-dir", data_dir, "--model-dir", model_dir,
                        script=f"{APPS}/evaluate.py", name="score")


def make_flow(scheduler: str = SCHEDULER) -> Flow[..., float]:
    """Builds the sweep flow for one scheduler.

    Args:
        scheduler: Where the jobs run.

    Returns:
        The ``@flow``; it returns the best learning rate.
    """
    prepare = component_task("utils.python", scheduler=scheduler, name="prepare")
    train = component_task(trial, scheduler=scheduler, name="trial", retries=1)
    evaluate = component_task(score, scheduler=scheduler, name="score")

    @flow(name="tether-sweep", description="one DDP job per learning rate, in parallel")
    def sweep(workdir: str, lrs: list[float]) -> float:
        """Trains one model per learning rate in parallel and picks the best.

        Args:
            workdir: Where the data and the models go.
            lrs: The learning rates to try.

        Returns:
            The learning rate of the model with the lowest evaluation error.
        """
        data = prepare("--data-dir", os.path.join(workdir, "data"),
                       script=f"{APPS}/prepare_data.py").outputs
        model_dirs = [os.path.join(workdir, f"model-lr{lr}") for lr in lrs]
        trained = train.map(lr=lrs, model_dir=model_dirs, features=unmapped(data["features"]),
                            seed=unmapped(data["seed"]))
        scores = evaluate.map(model_dir=model_dirs, data_dir=unmapped(data["data_dir"]),
                              wait_for=trained)
        mses = [s.result().outputs["mse"] for s in scores]
        for lr, mse in zip(lrs, mses):
            print(f"lr {lr}: mse {mse:.6f}")
        return lrs[mses.index(min(mses))]

    return sweep


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the sweep once and prints the best learning rate.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--workdir", default=None,
                        help="where the data and models go (default: a new temp directory)")
    parser.add_argument("--lr", type=float, nargs="+", default=[0.01, 0.05, 0.2])
    parser.add_argument("--scheduler", default=SCHEDULER)
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tether-prefect-sweep-")
    if args.scheduler == "local_cwd":  # the jobs' `python` is this interpreter
        bindir = os.path.dirname(sys.executable)
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    best = make_flow(args.scheduler)(workdir=workdir, lrs=args.lr)
    print(f"best lr {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
