"""Airflow provider metadata for tether (the ``apache_airflow_provider`` entry point).

Airflow's providers manager calls :func:`get_provider_info` for every installed package that
declares the entry point, so this module imports nothing: no Airflow, no tether internals.
It registers the operator's extra link and the trigger module with Airflow.
"""

from __future__ import annotations

from typing import Any

INTEGRATION = "Tether"

OPERATOR_MODULE = "tether.adapters.airflow.operator"
TRIGGER_MODULE = "tether.adapters.airflow.trigger"
LINK_CLASS = "tether.adapters.airflow.links.TetherJobLink"


def get_provider_info() -> dict[str, Any]:
    """The provider description Airflow validates against ``provider_info.schema.json``.

    Returns:
        Package name, integration, operator and trigger modules, and extra links.
    """
    return {
        "package-name": "tether",
        "name": "Tether",
        "description": (
            "Tether components as Airflow operators: run ML jobs (single process, DDP, ...) "
            "on any tether scheduler from a DAG task."
        ),
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://github.com/tether-ml/tether",
                "tags": ["software"],
            }
        ],
        "operators": [{"integration-name": INTEGRATION, "python-modules": [OPERATOR_MODULE]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": [TRIGGER_MODULE]}],
        "extra-links": [LINK_CLASS],
    }
