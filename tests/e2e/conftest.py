"""End-to-end tests: the session's real backends (the Kubernetes control plane) are fixtures
of :mod:`tests.e2e.infra.fixtures`, registered for the whole suite by ``tests/conftest.py``."""
