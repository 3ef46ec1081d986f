"""Copies one file between fsspec URLs: ``python -m tether.apps.utils.copy_main --src --dst``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

CHUNK = 1024 * 1024


def copy_url(src: str, dst: str) -> int:
    """Copies ``src`` to ``dst`` (any fsspec URLs), streaming in chunks.

    Args:
        src: Source URL.
        dst: Destination URL (parent directories are created).

    Returns:
        Bytes copied.
    """
    import fsspec

    fs_dst, path_dst = fsspec.core.url_to_fs(dst)
    parent = path_dst.rsplit("/", 1)[0] if "/" in path_dst else ""
    if parent:
        fs_dst.makedirs(parent, exist_ok=True)
    total = 0
    with fsspec.open(src, "rb") as fin, fsspec.open(dst, "wb") as fout:
        while True:
            chunk = fin.read(CHUNK)
            if not chunk:
                break
            fout.write(chunk)
            total += len(chunk)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description="copy a file between fsspec URLs")
    parser.add_argument("--src", required=True, help="source URL")
    parser.add_argument("--dst", required=True, help="destination URL")
    args = parser.parse_args(argv)
    try:
        n = copy_url(args.src, args.dst)
    except (OSError, ValueError) as e:
        print(f"copy: cannot copy {args.src} to {args.dst}: {e}", file=sys.stderr)
        return 1
    print(f"copied {n} bytes from {args.src} to {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
