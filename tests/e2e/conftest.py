"""End-to-end tests: the session's real backends (Kubernetes control plane, Slurm, Ray) are
fixtures of :mod:`tests.e2e.infra.fixtures`, registered for the whole suite by
``tests/conftest.py``."""
