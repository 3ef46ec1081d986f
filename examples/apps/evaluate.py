"""Evaluate step of the example pipeline (prepare -> DDP train -> evaluate).

Loads a linear model from ``--model-dir`` (``model.pt``: the ``state_dict`` of a
``torch.nn.Linear(features, 1)``) and the evaluation split ``--data-dir``/``eval.pt`` written
by ``prepare_data.py``, computes the mean squared error and publishes the outputs ``mse``,
``eval_samples`` and ``passed``. With ``--max-mse`` it fails (exit code 3) when the model is
worse than that, so an orchestrator sees a bad model as a failed step.

Run it through tether::

    tether run -s local_cwd utils.python --script examples/apps/evaluate.py -- \\
        --data-dir /tmp/tether-data --model-dir /tmp/tether-model
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from tether.tracker import AppRun  # noqa: E402

MODEL_FILE = "model.pt"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options of the app.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The options.
    """
    parser = argparse.ArgumentParser(description="evaluate a trained linear model")
    parser.add_argument("--model-dir", required=True, help=f"directory holding {MODEL_FILE}")
    parser.add_argument("--data-dir", required=True, help="directory written by prepare_data.py")
    parser.add_argument("--max-mse", type=float, default=None,
                        help="fail (exit 3) when the mean squared error is above this")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Evaluates and publishes the metrics.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0, 2 for missing inputs, 3 when ``--max-mse`` is exceeded.
    """
    args = parse_args(argv)
    model_path = os.path.join(args.model_dir, MODEL_FILE)
    eval_path = os.path.join(args.data_dir, "eval.pt")
    for what, path in (("model", model_path), ("evaluation data", eval_path)):
        if not os.path.exists(path):
            print(f"evaluate: no {what} at {path}", file=sys.stderr, flush=True)
            return 2
    with open(os.path.join(args.data_dir, "meta.json")) as f:
        features = int(json.load(f)["features"])
    data = torch.load(eval_path)
    model = torch.nn.Linear(features, 1)
    model.load_state_dict(torch.load(model_path))
    with torch.no_grad():
        mse = torch.nn.functional.mse_loss(model(data["x"]), data["y"]).item()
    passed = args.max_mse is None or mse <= args.max_mse
    print(f"evaluated {len(data['x'])} samples: mse {mse:.6f}"
          + ("" if args.max_mse is None else f" (max {args.max_mse}: "
             f"{'passed' if passed else 'FAILED'})"), flush=True)

    run = AppRun.run_from_env()
    if run.outputs_url:
        run.add_output("mse", mse)
        run.add_output("eval_samples", len(data["x"]))
        run.add_output("passed", passed)
    if not passed:
        print(f"evaluate: mse {mse:.6f} is above --max-mse {args.max_mse}", file=sys.stderr,
              flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
