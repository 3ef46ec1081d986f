"""Run options of ``gcp_batch`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from tether.specs import StructuredOpts

ProvisioningModel = Literal["STANDARD", "SPOT", "PREEMPTIBLE"]
"""The ``provisioning_model`` choices (Batch's VM provisioning models)."""
PROVISIONING_MODELS: tuple[ProvisioningModel, ...] = typing.get_args(ProvisioningModel)


@dataclass
class GcpBatchOpts(StructuredOpts):
    """Run options of the ``gcp_batch`` scheduler."""

    project: str | None = None
    """Google Cloud project (default: ``$GOOGLE_CLOUD_PROJECT`` or ``$CLOUDSDK_CORE_PROJECT``)."""

    location: str = "us-central1"
    """Region the job runs in."""

    machine_type: str | None = None
    """Compute Engine machine type of the VMs (default: Batch picks one that fits)."""

    provisioning_model: ProvisioningModel = "STANDARD"
    """VM provisioning model: STANDARD, SPOT or PREEMPTIBLE."""

    accelerator_type: str = "nvidia-tesla-t4"
    """GPU type attached when a role asks for GPUs (Resource.gpu per VM)."""

    image_repo: str | None = None
    """Registry/repository prefixed to role images that name no registry (``trainer:1``)."""

    service_account: str | None = None
    """Service account email of the VMs."""

    max_run_duration: str | None = None
    """Longest run of a task, as a duration like ``3600s``."""

    labels: dict[str, str] = field(default_factory=dict)
    """Extra labels on the job (tether's own labels win on a clash)."""
