"""Orchestrator adapters: tether components as Airflow operators, Prefect tasks and KFP steps.

Each adapter lives in its own subpackage and imports its orchestrator only there; the shared
mechanics (job identity, submit-or-attach, log fan-in, outputs, cancellation, dry-run) live
once in :mod:`tether.adapters.common`.
"""
