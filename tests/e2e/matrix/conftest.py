"""Fixtures every matrix column uses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def prefect_api_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real Prefect API server for the module's Prefect cells."""
    from tests.e2e.infra.prefect import prefect_env, start_server

    home = tmp_path_factory.mktemp("prefect")
    server = start_server(home / "server")
    try:
        yield prefect_env(home / "client", server.api_url)
    finally:
        server.stop()
