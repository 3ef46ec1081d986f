"""Tests of the Prefect 3 adapter (real flows against a real Prefect API)."""
