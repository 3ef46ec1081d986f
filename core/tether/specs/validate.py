"""Validation of an :class:`AppDef` before anything is submitted."""

from __future__ import annotations

from tether.specs.app import AppDef, Role
from tether.specs.mounts import BindMount, DeviceMount, VolumeMount
from tether.specs.secrets import SecretRef
from tether.specs.status import RetryPolicy


def _role_errors(role: Role) -> list[str]:
    where = f"role {role.name!r}"
    errs: list[str] = []
    if not role.name or not role.name.strip():
        errs.append("a role has an empty name: every role needs a name")
    if not role.entrypoint or not role.entrypoint.strip():
        errs.append(f"{where}: entrypoint is empty; set the program to run (e.g. 'python')")
    if not isinstance(role.args, list) or not all(isinstance(a, str) for a in role.args):
        errs.append(f"{where}: args must be a list of strings, got {role.args!r}")
    bad_env = [k for k, v in role.env.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad_env:
        errs.append(f"{where}: env values must be strings; offending keys: {bad_env}")
    for k, ref in role.secrets.items():
        if not isinstance(ref, SecretRef) or not ref.name:
            errs.append(f"{where}: secrets[{k!r}] must be a SecretRef with a name, got {ref!r}")
        if k in role.env:
            errs.append(f"{where}: {k!r} is set in both env and secrets; keep one")
    if role.num_replicas < 1:
        errs.append(f"{where}: num_replicas must be >= 1, got {role.num_replicas}")
    if role.min_replicas is not None:
        if role.min_replicas < 0:
            errs.append(f"{where}: min_replicas must be >= 0, got {role.min_replicas}")
        elif role.min_replicas > role.num_replicas:
            errs.append(
                f"{where}: min_replicas ({role.min_replicas}) must not exceed "
                f"num_replicas ({role.num_replicas})"
            )
    if role.max_retries < 0:
        errs.append(f"{where}: max_retries must be >= 0, got {role.max_retries}")
    if not isinstance(role.retry_policy, RetryPolicy):
        errs.append(
            f"{where}: retry_policy must be one of {[p.value for p in RetryPolicy]}, "
            f"got {role.retry_policy!r}"
        )
    res = role.resource
    # -1 everywhere is the "scheduler default" placeholder; any other negative is an error
    for fld in ("cpu", "gpu", "memMB"):
        val = getattr(res, fld)
        if val < 0 and val != -1:
            errs.append(f"{where}: resource.{fld} must be >= 0, got {val}")
    for dev, count in res.devices.items():
        if count < 0:
            errs.append(f"{where}: resource.devices[{dev!r}] must be >= 0, got {count}")
    for pname, port in role.port_map.items():
        if not 0 < port < 65536:
            errs.append(f"{where}: port_map[{pname!r}] = {port} is not a port (1-65535)")
    for m in role.mounts:
        if not isinstance(m, (BindMount, VolumeMount, DeviceMount)):
            errs.append(f"{where}: mount {m!r} is not a BindMount, VolumeMount or DeviceMount")
    return errs


def validate(app: AppDef) -> None:
    """Checks an app for mistakes that no scheduler could run.

    Args:
        app: The app.

    Raises:
        ValueError: Listing every problem, each naming the role and the field.
    """
    errs: list[str] = []
    if not app.name or not app.name.strip():
        errs.append("app name is empty")
    if not app.roles:
        errs.append(f"app {app.name!r} has no roles: add at least one Role")
    seen: set[str] = set()
    for role in app.roles:
        if role.name in seen:
            errs.append(f"duplicate role name {role.name!r}: role names must be unique")
        seen.add(role.name)
        errs.extend(_role_errors(role))
    if errs:
        raise ValueError("invalid AppDef:\n  - " + "\n  - ".join(errs))
