"""TorchX's ``torchx.plugins``: ``register``, ``registry()`` and ``tether_plugins.*`` namespace
packages (see :mod:`tether.specs.plugins`, where it lives so named resources can use it).

Example::

    from tether import plugins

    schedulers = plugins.registry().get(plugins.PluginType.SCHEDULER)
"""

from __future__ import annotations

from tether.specs.plugins import (
    NAMESPACE,
    PluginRegistry,
    PluginType,
    RegistrationError,
    register,
    registry,
)

__all__ = [
    "NAMESPACE",
    "PluginRegistry",
    "PluginType",
    "RegistrationError",
    "register",
    "registry",
]
