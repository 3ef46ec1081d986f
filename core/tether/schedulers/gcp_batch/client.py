"""The only place tether creates a Google Cloud Batch client (``google-cloud-batch``, an
optional extra, imported here on first use) and turns its messages into dicts."""

from __future__ import annotations

import importlib
from typing import Any

from tether.errors import BackendError


class GcpBatchClientError(BackendError):
    """The client cannot be created (package or credentials missing) or a call failed."""

    backend, kind = "gcp_batch", "connection"


def make_client() -> Any:
    """Creates a ``google.cloud.batch_v1.BatchServiceClient`` with the default credentials.

    Returns:
        The client.

    Raises:
        GcpBatchClientError: When ``google-cloud-batch`` is not installed or there are no
            application default credentials, saying what to do.
    """
    try:
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import batch_v1
    except ImportError as e:
        raise GcpBatchClientError(
            "the gcp_batch scheduler needs google-cloud-batch: pip install 'tether[gcp_batch]'"
        ) from e
    try:
        return batch_v1.BatchServiceClient()
    except DefaultCredentialsError as e:
        raise GcpBatchClientError(
            "no Google Cloud credentials: run `gcloud auth application-default login` or set "
            f"$GOOGLE_APPLICATION_CREDENTIALS to a service account key file ({e})"
        ) from e


def to_dict(message: Any) -> dict[str, Any]:
    """A Batch message as a dict with proto field names and enum names.

    Args:
        message: A proto-plus message (or already a dict).

    Returns:
        The dict.
    """
    if isinstance(message, dict):
        return message
    return dict(
        type(message).to_dict(
            message, use_integers_for_enums=False, preserving_proto_field_name=True
        )
    )


def read_log_lines(project: str, log_filter: str) -> list[str]:
    """Text payloads of the Cloud Logging entries matching ``log_filter``, oldest first.

    Args:
        project: The project whose logs to read.
        log_filter: A Cloud Logging filter.

    Returns:
        The lines.

    Raises:
        GcpBatchClientError: When ``google-cloud-logging`` is not installed.
    """
    try:
        # imported by name: whether mypy sees google.cloud.logging depends on what is installed
        cloud_logging: Any = importlib.import_module("google.cloud.logging")
    except ImportError as e:
        raise GcpBatchClientError(
            "reading gcp_batch logs needs google-cloud-logging: pip install google-cloud-logging"
        ) from e
    client = cloud_logging.Client(project=project)
    return [
        str(entry.payload)
        for entry in client.list_entries(filter_=log_filter, order_by=cloud_logging.ASCENDING)
    ]
