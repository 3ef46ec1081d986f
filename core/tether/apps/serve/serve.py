"""Registers a model archive with TorchServe (the ``serve.torchserve`` component).

Downloads the archive from an fsspec URL into a temporary directory, serves that directory
over HTTP and calls ``POST {management_api}/models?url=<archive URL>&<params>``. Registration
is synchronous (``synchronous=true`` unless given), so the file server is stopped once
TorchServe answers.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence


def _host_address() -> str:
    """An address of this host that others can reach (falls back to the host name)."""
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def download(model_path: str, dest_dir: str) -> str:
    """Copies the archive into ``dest_dir``.

    Args:
        model_path: fsspec URL of the archive.
        dest_dir: Local directory.

    Returns:
        The archive's file name.
    """
    import fsspec

    fname = os.path.basename(model_path.rstrip("/")) or "model.mar"
    with fsspec.open(model_path, "rb") as fin, open(os.path.join(dest_dir, fname), "wb") as fout:
        while chunk := fin.read(1024 * 1024):
            fout.write(chunk)
    return fname


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        print("serve: " + format % args, flush=True)


def register(management_api: str, archive_url: str, params: dict[str, str]) -> str:
    """Asks TorchServe to register a model archive.

    Args:
        management_api: TorchServe's management API base URL.
        archive_url: Where TorchServe downloads the archive from.
        params: Extra query parameters (``synchronous=true`` is added unless given).

    Returns:
        TorchServe's answer.

    Raises:
        RuntimeError: When TorchServe answers with an error or cannot be reached.
    """
    query = {"url": archive_url, "synchronous": "true", **params}
    url = f"{management_api.rstrip('/')}/models?{urllib.parse.urlencode(query)}"
    if not url.startswith(("http://", "https://")):
        raise RuntimeError(f"management API {management_api!r} must be an http(s) URL")
    req = urllib.request.Request(url, method="POST")  # noqa: S310 - scheme checked above
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:  # noqa: S310
            return str(resp.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        raise RuntimeError(f"TorchServe answered {e.code}: {body.strip()}") from e
    except urllib.error.URLError as e:
        raise RuntimeError(f"cannot reach TorchServe at {management_api}: {e.reason}") from e


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description="register a model archive with TorchServe")
    parser.add_argument("--model_path", required=True, help="fsspec URL of the .mar archive")
    parser.add_argument("--management_api", required=True, help="TorchServe management API")
    parser.add_argument("--port", type=int, default=8222, help="port to serve the archive on")
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="registration parameter (repeatable)")
    parser.add_argument("--dryrun", action="store_true", help="do not register")
    parser.add_argument("--host", default="", help="address TorchServe reaches this host at")
    args = parser.parse_args(argv)
    params: dict[str, str] = {}
    for kv in args.param:
        key, sep, value = kv.partition("=")
        if not sep:
            parser.error(f"--param {kv!r} is not K=V")
        params[key] = value

    with tempfile.TemporaryDirectory(prefix="tether-serve-") as tmp:
        try:
            fname = download(args.model_path, tmp)
        except (OSError, ValueError) as e:
            print(f"serve: cannot download {args.model_path}: {e}", file=sys.stderr)
            return 1
        handler = functools.partial(_QuietHandler, directory=tmp)
        server = http.server.ThreadingHTTPServer(("", args.port), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            archive_url = f"http://{args.host or _host_address()}:{server.server_port}/{fname}"
            print(f"serve: serving {args.model_path} at {archive_url}", flush=True)
            if args.dryrun:
                print("serve: --dryrun, not registering", flush=True)
                return 0
            try:
                answer = register(args.management_api, archive_url, params)
            except RuntimeError as e:
                print(f"serve: {e}", file=sys.stderr)
                return 1
            print(f"serve: registered: {answer.strip()}", flush=True)
            return 0
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    sys.exit(main())
