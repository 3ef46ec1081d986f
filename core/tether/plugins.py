"""TorchX's ``torchx.plugins``: ``register``, ``registry()`` and ``tether_plugins.*`` namespace
packages (see :mod:`tether.specs.plugins`, where it lives so named resources can use it).

Example::

    from tether import plugins

    schedulers = plugins.registry().get(plugins.PluginType.SCHEDULER)
"""

from __future__ import annotations

from tether.specs.fractionals import (
    EIGHTH,
    HALF,
    QUARTER,
    SIXTEENTH,
    WHOLE,
    halve_mem_down_to,
    powers_of_two_gpus,
)
from tether.specs.plugin_errors import RegistrationError
from tether.specs.plugins import (
    NAMESPACE,
    PluginRegistry,
    PluginSource,
    PluginType,
    register,
    registry,
)
from tether.specs.resources import resource_tags

__all__ = [
    "EIGHTH",
    "HALF",
    "NAMESPACE",
    "QUARTER",
    "SIXTEENTH",
    "WHOLE",
    "PluginRegistry",
    "PluginSource",
    "PluginType",
    "RegistrationError",
    "halve_mem_down_to",
    "powers_of_two_gpus",
    "register",
    "registry",
    "resource_tags",
]
