"""An HTTP proxy that a test can make answer with faults: 429 with ``Retry-After``, 5xx,
an AWS ``ThrottlingException``, for chosen requests, while it forwards the others.

Put between a client and a real server (the kube-apiserver, moto's server) to inject what a
busy or failing server answers, and to count every request that reached it: each is kept
in :attr:`FaultProxy.seen` with the time it arrived (``time.monotonic``) and what was
answered. The client talks plain HTTP to the proxy; the proxy talks HTTP or HTTPS (not
verified) to the server. Streamed answers (a Kubernetes watch) are forwarded chunk by chunk;
:meth:`FaultProxy.drop` cuts the open ones. Threads only; stopped by :meth:`close`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
       "host", "content-length"}  # fmt: skip


@dataclass
class Seen:
    """One request the proxy received.

    Attributes:
        at: When it arrived (``time.monotonic()``).
        method: The HTTP method.
        path: The path, without the query.
        query: The query's parameters (first value of each).
        headers: The request's headers (lower-case names).
        body: The request's body.
        status: What was answered (0 while a forwarded answer streams, or if it failed).
        injected: The answer was a fault of the proxy's, not the server's.
    """

    at: float
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    status: int = 0
    injected: bool = False


@dataclass
class Fault:
    """An answer the proxy gives instead of forwarding.

    Attributes:
        status: The HTTP status.
        body: The body.
        headers: Extra headers (``Retry-After``, ``x-amzn-ErrorType``...).
    """

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


Injector = Callable[[Seen], "Fault | None"]


class FaultProxy:
    """Forwards ``http://127.0.0.1:PORT`` to ``upstream`` unless :attr:`inject` answers.

    Args:
        upstream: ``http://host:port`` or ``https://host:port``.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self.seen: list[Seen] = []
        self.inject: Injector | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, name="httpfault",
                         daemon=True).start()  # fmt: skip

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def requests(self, since: float = 0.0) -> list[Seen]:
        """The requests received at or after ``since`` (a ``time.monotonic()``), in order."""
        with self._lock:
            return [s for s in self.seen if s.at >= since]

    def drop(self) -> None:
        """Cuts every open connection (a watch streaming now ends mid-stream)."""
        with self._lock:
            socks = list(self._open)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stops serving and cuts every connection."""
        self._server.shutdown()
        self._server.server_close()
        self.drop()

    # ---- one request ------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        parts = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in h.headers.items()}
        seen = Seen(time.monotonic(), h.command, parts.path, query, headers, body)
        with self._lock:  # seen and cuttable at once: drop() misses no request it saw
            self.seen.append(seen)
            self._open.add(h.connection)
        try:
            inject = self.inject
            fault = inject(seen) if inject is not None else None
            if fault is None:
                self._forward(h, seen, body)
                return
            seen.status, seen.injected = fault.status, True
            h.send_response(fault.status)
            for k, v in fault.headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(fault.body)))
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(fault.body)
        finally:
            with self._lock:
                self._open.discard(h.connection)

    def _forward(self, h: BaseHTTPRequestHandler, seen: Seen, body: bytes) -> None:
        conn: http.client.HTTPConnection
        if self._https:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=900, context=ctx)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=900)
        upstream: socket.socket | None = None
        try:
            fwd = {k: v for k, v in h.headers.items() if k.lower() not in HOP}
            conn.request(h.command, h.path, body=body or None, headers=fwd)
            upstream = conn.sock
            if upstream is not None:
                with self._lock:
                    self._open.add(upstream)
            resp = conn.getresponse()
            seen.status = resp.status
            h.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    h.send_header(k, v)
            h.send_header("Connection", "close")
            if resp.chunked or resp.length is None:
                self._stream(h, resp)
            else:
                data = resp.read()
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
        except (OSError, http.client.HTTPException):
            pass  # the client or the server went away (or drop() cut it)
        finally:
            if upstream is not None:
                with self._lock:
                    self._open.discard(upstream)
            conn.close()

    @staticmethod
    def _stream(h: BaseHTTPRequestHandler, resp: http.client.HTTPResponse) -> None:
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        while True:
            data = resp.read1(65536)
            if not data:
                break
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")
