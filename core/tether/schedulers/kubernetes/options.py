"""Run options of ``kubernetes`` (their docstrings are the ``runopts`` help)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Final, Literal

from tether.specs import StructuredOpts

DEFAULT_NAMESPACE = "default"
Gang = Literal["none", "volcano", "kueue", "appwrapper"]
"""The ``gang`` choices."""
GANG_NONE: Final = "none"
GANG_VOLCANO: Final = "volcano"
GANG_KUEUE: Final = "kueue"
GANG_APPWRAPPER: Final = "appwrapper"
GANG_OPTIONS: tuple[Gang, ...] = typing.get_args(Gang)
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
"""The ``image_pull_policy`` choices."""
IMAGE_PULL_POLICIES: tuple[ImagePullPolicy, ...] = typing.get_args(ImagePullPolicy)


@dataclass
class KubernetesOpts(StructuredOpts):
    """Run options of the ``kubernetes`` scheduler."""

    namespace: str = DEFAULT_NAMESPACE
    """Namespace to create the app's objects in."""

    context: str | None = None
    """Kubeconfig context (cluster and user) to submit to (default: the kubeconfig's current
    context). Set it in ``[kubernetes]`` of .tetherconfig to have status, logs and cancel of
    later commands use it too."""

    service_account: str | None = None
    """Service account the pods run as (default: the namespace's ``default``)."""

    priority_class: str | None = None
    """PriorityClass name of the pods (``priorityClassName``)."""

    image_pull_secrets: list[str] = field(default_factory=list)
    """Names of Secrets holding registry credentials (``imagePullSecrets``)."""

    dashboard_url: str | None = None
    """URL of the job's page in a dashboard, with ``{namespace}`` and ``{name}`` (e.g.
    ``https://dash.example/#/job/{namespace}/{name}``); ``status``/``describe`` return it as
    ``ui_url`` (the Airflow task's link)."""

    env_from: list[str] = field(default_factory=list)
    """Secrets and ConfigMaps whose keys become env vars, each ``secret:NAME`` or
    ``configmap:NAME`` (``envFrom``; the values stay in the cluster)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    """Extra node labels the pods must land on (merged with named-resource capabilities)."""

    tolerations: list[str] = field(default_factory=list)
    """Taints the pods tolerate, each ``key[=value][:effect]`` (no value: operator Exists)."""

    image_repo: str | None = None
    """Registry/repository prefixed to role images that name no registry (``trainer:1``)."""

    labels: dict[str, str] = field(default_factory=dict)
    """Extra labels on every object (tether's own labels win on a clash)."""

    annotations: dict[str, str] = field(default_factory=dict)
    """Extra annotations on every object."""

    gang: Gang = GANG_NONE
    """Gang scheduling: none (plain Jobs), volcano, kueue or appwrapper (MCAD)."""

    queue: str | None = None
    """Queue for gang=volcano (default ``default``) or the Kueue LocalQueue for gang=kueue."""

    scheduler_name: str | None = None
    """Pod ``schedulerName`` (gang=volcano defaults to ``volcano``)."""

    reserved_millicpu: int = 100
    """CPU (millicores) kept off each pod's request for system daemons (capped at half)."""

    reserved_memory_mb: int = 1024
    """Memory (MiB) kept off each pod's request for system daemons (capped at half)."""

    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource that Resource.gpu asks for (e.g. amd.com/gpu)."""

    image_pull_policy: ImagePullPolicy | None = None
    """Container imagePullPolicy: Always, IfNotPresent or Never (default: the cluster's)."""

    image_pull_timeout: int = 120
    """Seconds an image pull may keep failing before the app is FAILED (0: at once)."""

    ttl_seconds_after_finished: int | None = None
    """Seconds after a Job finished before Kubernetes deletes it with its pods
    (``ttlSecondsAfterFinished``; default: kept until ``tether delete``). Status and logs of
    a deleted app are gone, so leave time for whoever reads them (e.g. 300)."""

    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, used in $TETHER_RANK0_HOST."""
