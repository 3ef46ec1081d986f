"""Fixtures of the component tests."""

from __future__ import annotations

import pytest

from tests.fixtures.plugin import ensure_test_plugin


@pytest.fixture(scope="session")
def test_plugin() -> None:
    """The test plugin package is installed (its entry points are registered)."""
    ensure_test_plugin()
