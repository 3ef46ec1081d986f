"""A service whose port another process took before it bound it starts again on a new one.

Real ``moto_server`` and ``docker-registry`` processes; the first port they are given is
held bound by this test (as a process's outgoing connection would hold it).
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.infra import moto, ports, registry


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port this test keeps bound (not listening) until the test ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def _service(name: str) -> tuple[Any, Any]:
    """The infra module and an unstarted service (skips when its binary is missing)."""
    if name == "moto":
        if moto.moto_server_binary() is None:
            pytest.skip("moto_server is not installed")
        return moto, moto.MotoServer()
    if shutil.which("docker-registry") is None:
        pytest.skip("docker-registry is not installed (tests/e2e/infra/setup.d/30-registry.sh)")
    return registry, registry.Registry()


@pytest.mark.parametrize("name", ["moto", "registry"])
def test_a_service_starts_on_a_new_port_when_its_first_was_taken(
    name: str, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, service = _service(name)
    given = [held_port]
    monkeypatch.setattr(module, "free_port", lambda: given.pop(0) if given else ports.free_port())
    with service:
        assert not given  # it was offered the taken port first
        assert service.port != held_port
        with socket.create_connection(("127.0.0.1", service.port), timeout=10):
            pass  # it listens on its new port
