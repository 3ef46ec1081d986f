"""Evaluates the Booth function and records the result (the ``utils.booth`` component)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def booth(x1: float, x2: float) -> float:
    """The Booth function: ``(x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2`` (0 at (1, 3)).

    Args:
        x1: First coordinate.
        x2: Second coordinate.

    Returns:
        The value.
    """
    return (x1 + 2 * x2 - 7) ** 2 + (2 * x1 + x2 - 5) ** 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: prints the value and writes ``{tracker_base}/{trial_idx}.json``.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    import fsspec

    parser = argparse.ArgumentParser(description="evaluate the Booth function")
    parser.add_argument("--x1", type=float, required=True)
    parser.add_argument("--x2", type=float, required=True)
    parser.add_argument("--trial_idx", type=int, default=0)
    parser.add_argument("--tracker_base", default="/tmp/tether-booth")
    args = parser.parse_args(argv)
    value = booth(args.x1, args.x2)
    doc = {"x1": args.x1, "x2": args.x2, "trial_idx": args.trial_idx, "booth_eval": value}
    fs, base = fsspec.core.url_to_fs(args.tracker_base)
    fs.makedirs(base, exist_ok=True)
    with fs.open(f"{base.rstrip('/')}/{args.trial_idx}.json", "w") as f:
        json.dump(doc, f)
    print(f"booth({args.x1}, {args.x2}) = {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
