"""The job model of tether: apps, roles, resources, states, macros, run options and handles.

This package imports nothing else of tether but :mod:`tether.errors` (its exceptions' root)
and no third-party package beyond the standard library. Each name is imported on first use
(PEP 562): a process that needs a few of them (the local supervisor, the CLI) does not import
the whole model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names that are also their module's name are imported now: importing a submodule sets the
# package's attribute of that name to the module, and the name must stay the object.
from tether.specs.macros import macros
from tether.specs.named_resources import named_resources
from tether.specs.runopts import runopts
from tether.specs.validate import validate

if TYPE_CHECKING:
    from tether.errors import SpecError, SpecTypeError
    from tether.specs.app import AppDef, Role
    from tether.specs.constants import ALL, MISSING, TETHER_HOME, UNKNOWN
    from tether.specs.dryrun import AppDryRunInfo
    from tether.specs.failures import Failure, FailureCause
    from tether.specs.handles import (
        AppHandle,
        MalformedAppHandleException,
        ParsedAppHandle,
        make_app_handle,
        parse_app_handle,
    )
    from tether.specs.mounts import BindMount, DeviceMount, Mount, VolumeMount, parse_mounts
    from tether.specs.named_resources import (
        NamedResources,
        get_named_resource,
        get_named_resources,
        reload_named_resources,
        resource,
    )
    from tether.specs.recovery import RecoveryPolicy
    from tether.specs.resources import NULL_RESOURCE, Resource
    from tether.specs.runopts import (
        CfgVal,
        InvalidRunConfigException,
        StructuredOpts,
        runopt,
    )
    from tether.specs.secrets import (
        SecretRef,
        is_secret_name,
        mask_args,
        mask_env,
        mask_text,
        mask_value,
    )
    from tether.specs.states import AppState, RetryPolicy, is_terminal
    from tether.specs.status import AppStatus, AppStatusError, ReplicaStatus, RoleStatus
    from tether.specs.unknown_scheduler import UnknownSchedulerException
    from tether.specs.workspace import Workspace

NONE = "<NONE>"
"""An optional string attribute left unset (also ``tether.specs.constants.NONE``)."""

__all__ = [
    "ALL",
    "MISSING",
    "NONE",
    "NULL_RESOURCE",
    "TETHER_HOME",
    "UNKNOWN",
    "AppDef",
    "AppDryRunInfo",
    "AppHandle",
    "AppState",
    "AppStatus",
    "AppStatusError",
    "BindMount",
    "CfgVal",
    "DeviceMount",
    "Failure",
    "FailureCause",
    "InvalidRunConfigException",
    "MalformedAppHandleException",
    "Mount",
    "NamedResources",
    "ParsedAppHandle",
    "RecoveryPolicy",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "SecretRef",
    "SpecError",
    "SpecTypeError",
    "StructuredOpts",
    "UnknownSchedulerException",
    "VolumeMount",
    "Workspace",
    "cfg_from_str",
    "get_named_resource",
    "get_named_resources",
    "is_secret_name",
    "is_terminal",
    "macros",
    "make_app_handle",
    "mask_args",
    "mask_env",
    "mask_text",
    "mask_value",
    "named_resources",
    "parse_app_handle",
    "parse_mounts",
    "reload_named_resources",
    "resource",
    "runopt",
    "runopts",
    "validate",
]


def cfg_from_str(opts: runopts, cfg_str: str) -> dict[str, CfgVal]:
    """Parses ``k=v,k2=v2`` against ``opts`` (see :meth:`runopts.cfg_from_str`).

    Args:
        opts: The scheduler's run options (types drive the conversion).
        cfg_str: The string.

    Returns:
        The parsed options.
    """
    return opts.cfg_from_str(cfg_str)

_EXPORTS: dict[str, str] = {
    "AppDef": "tether.specs.app",
    "Role": "tether.specs.app",
    "AppDryRunInfo": "tether.specs.dryrun",
    "SpecError": "tether.errors",
    "SpecTypeError": "tether.errors",
    "ALL": "tether.specs.constants",
    "MISSING": "tether.specs.constants",
    "TETHER_HOME": "tether.specs.constants",
    "UNKNOWN": "tether.specs.constants",
    "UnknownSchedulerException": "tether.specs.unknown_scheduler",
    "Failure": "tether.specs.failures",
    "FailureCause": "tether.specs.failures",
    "AppHandle": "tether.specs.handles",
    "MalformedAppHandleException": "tether.specs.handles",
    "ParsedAppHandle": "tether.specs.handles",
    "make_app_handle": "tether.specs.handles",
    "parse_app_handle": "tether.specs.handles",
    "BindMount": "tether.specs.mounts",
    "DeviceMount": "tether.specs.mounts",
    "Mount": "tether.specs.mounts",
    "VolumeMount": "tether.specs.mounts",
    "parse_mounts": "tether.specs.mounts",
    "NamedResources": "tether.specs.named_resources",
    "get_named_resource": "tether.specs.named_resources",
    "get_named_resources": "tether.specs.named_resources",
    "reload_named_resources": "tether.specs.named_resources",
    "resource": "tether.specs.named_resources",
    "RecoveryPolicy": "tether.specs.recovery",
    "NULL_RESOURCE": "tether.specs.resources",
    "Resource": "tether.specs.resources",
    "CfgVal": "tether.specs.runopts",
    "InvalidRunConfigException": "tether.specs.runopts",
    "StructuredOpts": "tether.specs.runopts",
    "runopt": "tether.specs.runopts",
    "SecretRef": "tether.specs.secrets",
    "is_secret_name": "tether.specs.secrets",
    "mask_args": "tether.specs.secrets",
    "mask_env": "tether.specs.secrets",
    "mask_text": "tether.specs.secrets",
    "mask_value": "tether.specs.secrets",
    "AppState": "tether.specs.states",
    "AppStatus": "tether.specs.status",
    "AppStatusError": "tether.specs.status",
    "ReplicaStatus": "tether.specs.status",
    "RetryPolicy": "tether.specs.states",
    "RoleStatus": "tether.specs.status",
    "is_terminal": "tether.specs.states",
    "Workspace": "tether.specs.workspace",
}


def __getattr__(name: str) -> Any:
    """Imports an exported name's module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
