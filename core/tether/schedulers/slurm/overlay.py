"""Overlays of the ``slurm`` scheduler: ``#SBATCH`` options tether does not model.

Stored with :func:`tether.specs.overlays.set_overlay` under kind :data:`OVERLAY_KIND`::

    set_overlay(app, "slurm", "sbatch", {"reservation": "maint", "signal": "B:USR1@60"})
    set_overlay(role, "slurm", "sbatch", {"time": "30", "exclusive": True, DEL("exclude"): None})

An overlay maps long option names (without ``--``) to a value: a string or number gives
``--name=value``, ``True`` gives the bare flag ``--name``, ``DEL("name")`` (or ``False``)
removes an option tether rendered. Each role's component gets its options from the run
options and resources first, then the app's overlay, then the role's own, last (so they win).
The job-wide lines tether relies on (name, output, chdir, comment) and the task count (every
replica is one task) cannot be overlaid.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tether.errors import SpecError
from tether.specs import AppDef, Role
from tether.specs.overlays import apply_overlay, get_overlay, validate_overlay

OVERLAY_NAMESPACE = "slurm"
OVERLAY_KIND = "sbatch"
OVERLAY_BLOCKLIST = [
    "job-name", "output", "error", "chdir", "comment", "parsable", "wrap", "hetjob",
    "het-group", "ntasks", "array",
]  # fmt: skip
"""Options tether sets itself (logs, identity, one task per replica)."""
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_RAW = object()


class SlurmOverlayError(SpecError):
    """A slurm overlay tether cannot apply; names the app or role, the key and what is allowed."""


def _field(key: str) -> str:
    return key.split(":", 1)[1] if key.startswith("__") and ":" in key else key


def check_overlay(overlay: dict[str, Any], where: str) -> None:
    """Checks one overlay's keys and values.

    Args:
        overlay: The overlay.
        where: ``app 'x'`` or ``role 'y'``, for the message.

    Raises:
        SlurmOverlayError: Naming the key, its value and what is allowed.
    """
    prefix = f"{where}: overlay {OVERLAY_NAMESPACE}/{OVERLAY_KIND}"
    try:
        validate_overlay(overlay, blocklist=OVERLAY_BLOCKLIST, overlay_name=OVERLAY_KIND)
    except ValueError as e:
        raise SlurmOverlayError(
            f"{prefix}: {e.args[0].split(':')[0]}: tether sets {', '.join(OVERLAY_BLOCKLIST)} "
            "itself (use the run options or the role instead)"
        ) from None
    for key, value in overlay.items():
        name = _field(key)
        if not _NAME.match(name):
            raise SlurmOverlayError(
                f"{prefix}: key {name!r} is not a long sbatch option name; give it without "
                "dashes, e.g. 'reservation'"
            )
        if key.startswith("__del__:"):
            continue
        if value is not None and not isinstance(value, str | int | float | bool):
            raise SlurmOverlayError(
                f"{prefix}: {name}={value!r} is a {type(value).__name__}; allowed: a string "
                "or number (--name=value), True (--name) or False (removed)"
            )


def app_overlays(app: AppDef) -> None:
    """Checks the app's and every role's slurm overlay (at dryrun).

    Args:
        app: The app.

    Raises:
        SlurmOverlayError: For the first bad overlay.
    """
    check_overlay(get_overlay(app, OVERLAY_NAMESPACE, OVERLAY_KIND), f"app {app.name!r}")
    for role in app.roles:
        check_overlay(get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND), f"role {role.name!r}")


def overlaid_flags(flags: Sequence[str], app: AppDef, role: Role) -> tuple[list[str], list[str]]:
    """A component's flags with the app's, then the role's overlay applied (last).

    Args:
        flags: The flags tether rendered (``--name=value``, ``--name``, or as given).
        app: The app.
        role: The component's role.

    Returns:
        The flags, and the option names the overlays set or removed (for the script's comment).

    Raises:
        SlurmOverlayError: For a bad overlay (see :func:`check_overlay`).
    """
    overlays = [
        (f"app {app.name!r}", get_overlay(app, OVERLAY_NAMESPACE, OVERLAY_KIND)),
        (f"role {role.name!r}", get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND)),
    ]
    if not any(o for _, o in overlays):
        return list(flags), []
    opts: dict[str, Any] = {}
    for flag in flags:
        if flag.startswith("--"):
            name, eq, value = flag[2:].partition("=")
            opts[name] = value if eq else True
        else:  # a short flag from sbatch_args: kept as given
            opts[flag] = _RAW
    touched: list[str] = []
    for where, overlay in overlays:
        check_overlay(overlay, where)  # scalars only: the merge cannot meet a type mismatch
        apply_overlay(opts, overlay)
        touched += [_field(k) for k in overlay]
    out = []
    for name, value in opts.items():
        if value is _RAW:
            out.append(name)
        elif value is True:
            out.append(f"--{name}")
        elif value is not False and value is not None:
            out.append(f"--{name}={value}")
    return out, list(dict.fromkeys(touched))
