"""The job model of tether: apps, roles, resources, states, macros, run options and handles.

This package imports nothing else of tether and no third-party package beyond the standard
library.
"""

from tether.specs.app import AppDef, Role
from tether.specs.dryrun import AppDryRunInfo
from tether.specs.errors import SpecError, SpecTypeError
from tether.specs.handles import (
    AppHandle,
    MalformedAppHandleException,
    ParsedAppHandle,
    make_app_handle,
    parse_app_handle,
)
from tether.specs.macros import macros
from tether.specs.mounts import BindMount, DeviceMount, Mount, VolumeMount, parse_mounts
from tether.specs.named_resources import (
    NamedResources,
    get_named_resource,
    get_named_resources,
    named_resources,
    reload_named_resources,
    resource,
)
from tether.specs.resources import NULL_RESOURCE, Resource
from tether.specs.runopts import (
    CfgVal,
    InvalidRunConfigException,
    StructuredOpts,
    runopt,
    runopts,
)
from tether.specs.secrets import SecretRef, is_secret_name, mask_args, mask_env, mask_text
from tether.specs.status import (
    AppState,
    AppStatus,
    AppStatusError,
    ReplicaStatus,
    RetryPolicy,
    RoleStatus,
    is_terminal,
)
from tether.specs.validate import validate
from tether.specs.workspace import Workspace

NONE = "<NONE>"

__all__ = [
    "NONE",
    "NULL_RESOURCE",
    "AppDef",
    "AppDryRunInfo",
    "AppHandle",
    "AppState",
    "AppStatus",
    "AppStatusError",
    "BindMount",
    "CfgVal",
    "DeviceMount",
    "InvalidRunConfigException",
    "MalformedAppHandleException",
    "Mount",
    "NamedResources",
    "ParsedAppHandle",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "SecretRef",
    "SpecError",
    "SpecTypeError",
    "StructuredOpts",
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
