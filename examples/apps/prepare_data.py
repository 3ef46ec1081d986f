"""Prepare step of the example pipeline (prepare -> DDP train -> evaluate).

Writes a small synthetic regression data set (``y = X @ w_true + noise``, the same problem
``train_ddp.py`` trains on for a given ``--seed`` and ``--features``) to ``--data-dir``:
``train.pt`` and ``eval.pt`` (tensors ``x`` and ``y``) plus ``meta.json``. It publishes the
outputs ``data_dir``, ``samples``, ``features`` and ``seed`` for the next steps (Airflow
XComs, Prefect results, KFP output parameters).

Run it through tether::

    tether run -s local_cwd utils.python --script examples/apps/prepare_data.py -- \\
        --data-dir /tmp/tether-data

or directly: ``python examples/apps/prepare_data.py --data-dir /tmp/tether-data``.
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options of the app.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The options.
    """
    parser = argparse.ArgumentParser(description="write a synthetic regression data set")
    parser.add_argument("--data-dir", "--out", dest="data_dir", required=True,
                        help="directory to write the data set to (created)")
    parser.add_argument("--samples", type=int, default=1024, help="training samples")
    parser.add_argument("--eval-samples", type=int, default=256, help="evaluation samples")
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("samples", "eval_samples", "features"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def make_split(samples: int, features: int, seed: int, split: int) -> dict[str, torch.Tensor]:
    """One split of the problem: inputs and targets.

    Args:
        samples: Rows.
        features: Input features.
        seed: Seed of the true weights (shared by every split).
        split: Index of the split (different rows per split).

    Returns:
        ``{"x": ..., "y": ...}``.
    """
    w_true = torch.randn(features, 1, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed + 1000 + split)
    x = torch.randn(samples, features, generator=gen)
    y = x @ w_true + 0.01 * torch.randn(samples, 1, generator=gen)
    return {"x": x, "y": y}


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the data set and publishes where it is.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    args = parse_args(argv)
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    torch.save(make_split(args.samples, args.features, args.seed, 0),
               os.path.join(data_dir, "train.pt"))
    torch.save(make_split(args.eval_samples, args.features, args.seed, 1),
               os.path.join(data_dir, "eval.pt"))
    meta = {"samples": args.samples, "eval_samples": args.eval_samples,
            "features": args.features, "seed": args.seed}
    with open(os.path.join(data_dir, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(f"wrote {args.samples} training and {args.eval_samples} evaluation samples "
          f"({args.features} features) to {data_dir}", flush=True)

    run = AppRun.run_from_env()
    if run.outputs_url:
        run.add_output("data_dir", data_dir)
        for key in ("samples", "features", "seed"):
            run.add_output(key, meta[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
