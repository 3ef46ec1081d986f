"""AWS EC2 instance types as named resources (``aws_<instance type>``).

Values are the instance's published vCPUs and accelerators, and its memory less TorchX's
memory tax: ``memMB = GiB * int(1024 * MEM_TAX)`` with ``MEM_TAX = 0.96`` (ECS/EC2 keep part
of the memory, and AWS Batch uses hard limits: a job asking for the full amount never starts).
The values equal TorchX's for the instance types TorchX lists.
Each resource carries the instance type as the capability
``node.kubernetes.io/instance-type`` and network/accelerator devices (EFA, Neuron) in
``devices``, and its name (``aws_p4d.24xlarge``) as a tag (``Resource.get_resource_name()``).
Each factory is also a module function named as TorchX names it: ``aws_p4d_24xlarge()``.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.specs.resources import Resource, resource_tags

K8S_ITYPE = "node.kubernetes.io/instance-type"
EFA_DEVICE = "vpc.amazonaws.com/efa"
NEURON_DEVICE = "aws.amazon.com/neurondevice"
MEM_TAX = 0.96
"""Share of an instance's memory a job may ask for (as TorchX)."""
GiB = int(1024 * MEM_TAX)
"""MiB per GiB of instance memory after the tax."""

# instance type: (vCPU, GPU, memory GiB, EFA interfaces, Neuron devices)
_INSTANCES: dict[str, tuple[int, int, int, int, int]] = {
    # general purpose / compute
    "t3.medium": (2, 0, 4, 0, 0),
    "m5.xlarge": (4, 0, 16, 0, 0),
    "m5.2xlarge": (8, 0, 32, 0, 0),
    "m5.4xlarge": (16, 0, 64, 0, 0),
    "m5.8xlarge": (32, 0, 128, 0, 0),
    "m5.12xlarge": (48, 0, 192, 0, 0),
    "m5.24xlarge": (96, 0, 384, 0, 0),
    "c5.18xlarge": (72, 0, 144, 0, 0),
    "c5n.18xlarge": (72, 0, 192, 1, 0),
    # NVIDIA V100
    "p3.2xlarge": (8, 1, 61, 0, 0),
    "p3.8xlarge": (32, 4, 244, 0, 0),
    "p3.16xlarge": (64, 8, 488, 0, 0),
    "p3dn.24xlarge": (96, 8, 768, 1, 0),
    # NVIDIA A100 / H100
    "p4d.24xlarge": (96, 8, 1152, 4, 0),
    "p4de.24xlarge": (96, 8, 1152, 4, 0),
    "p5.48xlarge": (192, 8, 2048, 32, 0),
    "p5e.48xlarge": (192, 8, 2048, 32, 0),
    "p5en.48xlarge": (192, 8, 2048, 16, 0),
    # NVIDIA T4
    "g4dn.xlarge": (4, 1, 16, 0, 0),
    "g4dn.2xlarge": (8, 1, 32, 0, 0),
    "g4dn.4xlarge": (16, 1, 64, 0, 0),
    "g4dn.8xlarge": (32, 1, 128, 1, 0),
    "g4dn.12xlarge": (48, 4, 192, 1, 0),
    "g4dn.16xlarge": (64, 1, 256, 1, 0),
    "g4dn.metal": (96, 8, 384, 1, 0),
    # NVIDIA A10G
    "g5.xlarge": (4, 1, 16, 0, 0),
    "g5.2xlarge": (8, 1, 32, 0, 0),
    "g5.4xlarge": (16, 1, 64, 0, 0),
    "g5.8xlarge": (32, 1, 128, 1, 0),
    "g5.12xlarge": (48, 4, 192, 1, 0),
    "g5.16xlarge": (64, 1, 256, 1, 0),
    "g5.24xlarge": (96, 4, 384, 1, 0),
    "g5.48xlarge": (192, 8, 768, 1, 0),
    # NVIDIA L4
    "g6.xlarge": (4, 1, 16, 0, 0),
    "g6.2xlarge": (8, 1, 32, 0, 0),
    "g6.4xlarge": (16, 1, 64, 0, 0),
    "g6.8xlarge": (32, 1, 128, 1, 0),
    "g6.12xlarge": (48, 4, 192, 1, 0),
    "g6.16xlarge": (64, 1, 256, 1, 0),
    "g6.24xlarge": (96, 4, 384, 1, 0),
    "g6.48xlarge": (192, 8, 768, 1, 0),
    # NVIDIA L40S
    "g6e.xlarge": (4, 1, 32, 0, 0),
    "g6e.2xlarge": (8, 1, 64, 0, 0),
    "g6e.4xlarge": (16, 1, 128, 0, 0),
    "g6e.8xlarge": (32, 1, 256, 1, 0),
    "g6e.12xlarge": (48, 4, 384, 1, 0),
    "g6e.16xlarge": (64, 1, 512, 1, 0),
    "g6e.24xlarge": (96, 4, 768, 2, 0),
    "g6e.48xlarge": (192, 8, 1536, 4, 0),
    # AWS Inferentia2
    "inf2.xlarge": (4, 0, 16, 0, 1),
    "inf2.8xlarge": (32, 0, 128, 0, 1),
    "inf2.24xlarge": (96, 0, 384, 0, 6),
    "inf2.48xlarge": (192, 0, 768, 0, 12),
    # AWS Trainium
    "trn1.2xlarge": (8, 0, 32, 0, 1),
    "trn1.32xlarge": (128, 0, 512, 8, 16),
    "trn1n.32xlarge": (128, 0, 512, 16, 16),
    "trn2.48xlarge": (192, 0, 2048, 16, 16),
}


def _factory(itype: str) -> Callable[[], Resource]:
    vcpu, gpu, mem_gib, efa, neuron = _INSTANCES[itype]

    def make() -> Resource:
        devices: dict[str, int] = {}
        if efa:
            devices[EFA_DEVICE] = efa
        if neuron:
            devices[NEURON_DEVICE] = neuron
        return Resource(
            cpu=vcpu,
            gpu=gpu,
            memMB=mem_gib * GiB,
            capabilities={K8S_ITYPE: itype},
            devices=devices,
            tags={resource_tags.RESOURCE_NAME: f"aws_{itype}"},
        )

    make.__name__ = "aws_" + itype.replace(".", "_")
    return make


NAMED_RESOURCES: dict[str, Callable[[], Resource]] = {
    f"aws_{itype}": _factory(itype) for itype in _INSTANCES
}


def instance_type_from_resource(resource: Resource) -> str | None:
    """The EC2 instance type a resource stands for (``p4d.24xlarge``), or None.

    Read from the ``node.kubernetes.io/instance-type`` capability that the ``aws_*`` named
    resources carry. As TorchX, warns when there is none (AWS Batch then cannot pick the
    instance type on a compute environment with several).

    Args:
        resource: The resource.

    Returns:
        The instance type, or None for a resource that names none.
    """
    itype = resource.capabilities.get(K8S_ITYPE)
    if not itype:
        import warnings  # only on this path

        warnings.warn(
            "cannot tell the instance type of the resource (it has no "
            f"{K8S_ITYPE!r} capability): a job on a compute environment with several "
            "instance types may land on the wrong one; use an aws_* named resource or set "
            "the capability",
            stacklevel=2,
        )
        return None
    return str(itype)


def __getattr__(name: str) -> Callable[[], Resource]:
    """``aws_p3_2xlarge`` and the like: TorchX's factory functions, one per instance type."""
    for factory in NAMED_RESOURCES.values():
        if factory.__name__ == name:
            return factory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
