"""Tests of the orchestrator adapters."""
