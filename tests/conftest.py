"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.plugin import activated, plugin_site

INFRA_FIXTURES = frozenset({
    "airflow_db",      # Airflow's metadata database, migrated; tasks run by dag.test()
    "prefect_api",     # a Prefect server (and workers)
    "prefect_test",
    "kfp_subprocess",  # kfp.local running pipeline steps
    "kube_binaries",   # the kube-apiserver of tests/e2e/infra
    "kube_cluster",
    "kube_api",
})
"""Fixtures that start real infrastructure: tests using them are ``e2e`` automatically."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test that starts real infrastructure ``e2e`` (``make test-fast`` skips them).

    Those are the tests under ``tests/e2e`` and the tests using an :data:`INFRA_FIXTURES`
    fixture, so no test can forget the marker.
    """
    e2e_dir = Path(__file__).parent / "e2e"
    for item in items:
        in_e2e = e2e_dir in Path(str(item.path)).parents
        if in_e2e or INFRA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def test_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test plugin's entry points are registered, for this test run only.

    Nothing is installed: a temporary site directory with the plugin's metadata goes on
    ``sys.path`` and ``PYTHONPATH`` (see :mod:`tests.fixtures.plugin`).
    """
    with activated(plugin_site(tmp_path_factory.mktemp("plugin-site"))):
        yield


@pytest.fixture(autouse=True)
def tether_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Points ``TETHER_STATE_DIR`` at a fresh directory, so no test touches ~/.local/state.

    Subprocesses started by a test inherit it through the environment.

    Returns:
        The state directory.
    """
    state = tmp_path_factory.mktemp("tether-state")
    monkeypatch.setenv("TETHER_STATE_DIR", str(state))
    return state


# Session fixtures of real infrastructure (one Kubernetes control plane per session, shared
# by tests/e2e and the contract suite) and the backend contract suite's harness parameter.
pytest_plugins = [
    "tests.e2e.infra.fixtures",
    "tests.e2e.infra.kube_node_fixtures",
    "tests.schedulers.contract.plugin",
]
