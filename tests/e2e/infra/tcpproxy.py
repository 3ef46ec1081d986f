"""A TCP forwarder that a test can cut: drop every open connection, refuse new ones.

Put between a client and a real server (TLS passes through untouched) to inject what a
network does to long-lived streams: a watch dropped mid-stream, an apiserver unreachable
for a while. Threads only; stopped by :meth:`close`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``.

    Args:
        upstream_host: The server's host.
        upstream_port: The server's port.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._refusing = threading.Event()
        self._closed = threading.Event()
        self.accepted = 0
        threading.Thread(target=self._accept, name="tcpproxy", daemon=True).start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def drop(self) -> None:
        """Cuts every open connection (both ends see a reset/EOF)."""
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def refuse(self) -> None:
        """From now on, closes each new connection at once (an unreachable server)."""
        self._refusing.set()

    def resume(self) -> None:
        """Forwards new connections again."""
        self._refusing.clear()

    def close(self) -> None:
        """Stops listening and cuts every connection."""
        self._closed.set()
        self._listener.close()
        self.drop()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.accepted += 1
            with self._lock:
                self._conns.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
