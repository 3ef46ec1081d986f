"""Pure rendering: AppDef + :class:`RayOpts` -> the Ray Jobs API submission (no I/O).

The request is what :meth:`ray.job_submission.JobSubmissionClient.submit_job` receives: the
``submission_id`` (the app id), the entrypoint running tether's driver
(:mod:`tether.schedulers.ray.driver`), the ``runtime_env`` and the job's ``metadata`` (the
app's identity). The replica plan (one entry per replica: argv, env from
:func:`~tether.schedulers.replica.materialize`, placement bundle) travels in
``runtime_env.env_vars[TETHER_RAY_PLAN]`` as JSON.

Overlays (:mod:`tether.specs.overlays`) are merged last, after everything tether rendered:
``set_overlay(role, "ray", "Replica", {...})`` into each of the role's replica entries
(``bundle``, ``argv``, ``env``, ``cwd`` and ``options``: extra arguments of the replica task's
Ray ``.options()``, e.g. ``{"resources": {"trn": 1}}``), then ``set_overlay(app or role, "ray",
"JobSubmission", {...})`` into the arguments of ``submit_job`` (``runtime_env``,
``metadata``, ``entrypoint_resources``...; the app's first, then each role's).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from tether.errors import SpecError
from tether.schedulers.api import JOB_KEY
from tether.schedulers.ray.driver import PLAN_ENV
from tether.schedulers.ray.options import PLACEMENT_STRATEGIES, RayOpts
from tether.schedulers.replica import materialize
from tether.specs import AppDef, Role
from tether.specs.overlays import apply_overlay, get_overlay
from tether.specs.secrets import mask_env

BACKEND = "ray"
DRIVER_MODULE = "tether_ray_driver"
"""Name of the package holding the driver that ``schedule`` ships in ``py_modules``."""
DRIVER_PLACEHOLDER = "<tether ray driver>"
"""Stands in ``py_modules`` for the driver package until ``schedule`` writes it."""

META_MANAGED_BY = "tether.managed_by"
META_APP_NAME = "tether.app"
META_SESSION = "tether.session"
META_ROLES = "tether.roles"
META_JOB_KEY = JOB_KEY
MANAGED_BY = "tether"

OVERLAY_NAMESPACE = "ray"
OVERLAY_REPLICA = "Replica"
"""Kind of the role overlay merged into each of its replicas' plan entries."""
OVERLAY_JOB = "JobSubmission"
"""Kind of the app (or role) overlay merged into the arguments of ``submit_job``."""
_REPLICA_FIXED = ("role", "replica_id", "optional")
"""Plan fields that identify a replica (its log lines, its macros): not overlayable."""
_JOB_FIXED = ("submission_id",)
_KINDS = (OVERLAY_REPLICA, OVERLAY_JOB)

_ID_JUNK = re.compile(r"[^a-z0-9]+")


class RayRenderError(SpecError):
    """An app or option that the ``ray`` scheduler cannot express."""


@dataclass
class RayJobRequest:
    """One Ray job submission.

    Attributes:
        submission_id: The app id (the job's submission id).
        entrypoint: The shell command that runs the driver.
        runtime_env: The job's runtime environment, without the plan.
        metadata: The job's metadata (tether's identity of the app).
        entrypoint_num_cpus: CPUs reserved for the driver.
        plan: What the driver runs (see :mod:`tether.schedulers.ray.driver`).
        extra: Further ``submit_job`` arguments (from a ``JobSubmission`` overlay).
    """

    submission_id: str
    entrypoint: str
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float = 0.0
    plan: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def submit_kwargs(self, driver_dir: str) -> dict[str, Any]:
        """The keyword arguments of ``submit_job``.

        Args:
            driver_dir: Local directory of the driver package to ship in ``py_modules``.

        Returns:
            The arguments.
        """
        env = dict(self.runtime_env)
        env["py_modules"] = [driver_dir if m == DRIVER_PLACEHOLDER else m
                             for m in env.get("py_modules", [])]
        env["env_vars"] = {**env.get("env_vars", {}), PLAN_ENV: json.dumps(self.plan)}
        return {
            "submission_id": self.submission_id,
            "entrypoint": self.entrypoint,
            "runtime_env": env,
            "metadata": dict(self.metadata),
            "entrypoint_num_cpus": self.entrypoint_num_cpus,
            **self.extra,
        }


def bundle(role: Role) -> dict[str, float]:
    """The placement-group bundle of one replica of ``role``.

    Args:
        role: The role.

    Returns:
        Ray resources: ``CPU`` (1 when unset), ``GPU`` and ``memory`` (bytes) when asked for.
    """
    res = role.resource
    out: dict[str, float] = {"CPU": float(res.cpu) if res.cpu >= 0 else 1.0}
    if res.gpu > 0:
        out["GPU"] = float(res.gpu)
    if res.memMB > 0:
        out["memory"] = float(res.memMB * 1024 * 1024)
    return out


def workspace_dir(app: AppDef) -> str | None:
    """The one directory that the roles' workspaces name, if any.

    Args:
        app: The app.

    Returns:
        The absolute directory, or None when no role has a workspace.

    Raises:
        RayRenderError: When a workspace maps projects or roles name different directories.
    """
    dirs: dict[str, str] = {}
    for role in app.roles:
        ws = role.workspace
        if ws is None:
            continue
        if not ws.is_unmapped_single_project():
            raise RayRenderError(
                f"role {role.name!r}: ray uploads one directory as the job's working_dir, but "
                f"the workspace {str(ws)!r} maps projects; use a single directory"
            )
        dirs[role.name] = os.path.abspath(os.path.expanduser(next(iter(ws.projects))))
    if len(set(dirs.values())) > 1:
        raise RayRenderError(
            "ray runs one working_dir per job, but the roles' workspaces differ: "
            + ", ".join(f"{r}={d}" for r, d in dirs.items())
        )
    return next(iter(dirs.values()), None)


def check_opts(opts: RayOpts) -> None:
    """Rejects invalid options, naming the field, the value and what is allowed.

    Args:
        opts: The options.

    Raises:
        RayRenderError: For a bad value.
    """
    if opts.placement_strategy not in PLACEMENT_STRATEGIES:
        close = difflib.get_close_matches(opts.placement_strategy.upper(), PLACEMENT_STRATEGIES, 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise RayRenderError(
            f"run option placement_strategy={opts.placement_strategy!r} is not one of "
            f"{', '.join(PLACEMENT_STRATEGIES)}{hint}"
        )
    if opts.placement_timeout < 0:
        raise RayRenderError(
            f"run option placement_timeout={opts.placement_timeout} must be >= 0 (0: wait forever)"
        )
    if opts.elastic_wait < 0:
        raise RayRenderError(f"run option elastic_wait={opts.elastic_wait} must be >= 0")
    if opts.entrypoint_num_cpus < 0:
        raise RayRenderError(
            f"run option entrypoint_num_cpus={opts.entrypoint_num_cpus} must be >= 0"
        )
    if not opts.python.strip():
        raise RayRenderError("run option python must name an interpreter, got ''")


def render(app: AppDef, opts: RayOpts, app_id: str, session_name: str) -> RayJobRequest:
    """Renders the job submission of ``app`` (pure).

    Args:
        app: The app (validated).
        opts: The run options (checked).
        app_id: The submission id to use.
        session_name: The runner's session (recorded in the metadata).

    Returns:
        The request.
    """
    working_dir = (
        os.path.abspath(os.path.expanduser(opts.working_dir)) if opts.working_dir
        else workspace_dir(app)
    )
    replicas: list[dict[str, Any]] = []
    for role in app.roles:
        for i in range(role.num_replicas):
            # the driver replaces TETHER_RANK0_HOST once the placement group is placed
            rep = materialize(role, app_id=app_id, replica_id=i, rank0_host="", img_root=".")
            replicas.append(
                {
                    "role": role.name,
                    "replica_id": i,
                    "argv": [rep.entrypoint, *rep.args],
                    "env": dict(rep.env),
                    "bundle": bundle(role),
                    # elastic: replicas beyond min_replicas start only if they fit
                    "optional": role.min_replicas is not None and i >= role.min_replicas,
                }
            )
            _overlay_replica(replicas[-1], role)
    runtime_env: dict[str, Any] = {
        "py_modules": [DRIVER_PLACEHOLDER],
        # one line per replica line in the job log: Ray must not fold repeated lines
        "env_vars": {**opts.env, "RAY_DEDUP_LOGS": "0"},
    }
    if working_dir:
        runtime_env["working_dir"] = working_dir
    if opts.pip:
        runtime_env["pip"] = list(opts.pip)
    metadata = {
        META_MANAGED_BY: MANAGED_BY,
        META_APP_NAME: app.name,
        META_SESSION: session_name,
        META_ROLES: json.dumps({r.name: r.num_replicas for r in app.roles}),
    }
    if app.metadata.get(JOB_KEY):
        metadata[META_JOB_KEY] = app.metadata[JOB_KEY]
    req = RayJobRequest(
        submission_id=app_id,
        entrypoint=f"{shlex.quote(opts.python)} -m {DRIVER_MODULE}",
        runtime_env=runtime_env,
        metadata=metadata,
        entrypoint_num_cpus=opts.entrypoint_num_cpus,
        plan={
            "app_id": app_id,
            "placement_strategy": opts.placement_strategy,
            "placement_timeout": opts.placement_timeout,
            "elastic_wait": opts.elastic_wait,
            "replicas": replicas,
        },
    )
    _overlay_job(req, app)
    return req


def _apply_checked(
    base: dict[str, Any], overlay: dict[str, Any], fixed: tuple[str, ...], where: str
) -> None:
    """Merges ``overlay`` into ``base``; it may not change the ``fixed`` fields."""
    before = {k: base.get(k) for k in fixed}
    apply_overlay(base, overlay)
    changed = sorted(k for k in fixed if base.get(k) != before[k])
    if changed:
        raise RayRenderError(
            f"{where} overlay may not change {', '.join(changed)}: tether identifies the "
            "job and its replicas by it"
        )


def _overlay_replica(entry: dict[str, Any], role: Role) -> None:
    """Merges the role's ``Replica`` overlay into one replica's plan entry (last)."""
    overlay = get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_REPLICA, kinds=_KINDS)
    if overlay:
        _apply_checked(entry, overlay, _REPLICA_FIXED,
                       f"role {role.name!r}: ray {OVERLAY_REPLICA}")


def _overlay_job(req: RayJobRequest, app: AppDef) -> None:
    """Merges the ``JobSubmission`` overlays (the app's, then each role's) into the
    ``submit_job`` arguments, last."""
    targets: list[tuple[str, AppDef | Role]] = [(f"app {app.name!r}", app)]
    targets += [(f"role {r.name!r}", r) for r in app.roles]
    overlays = [(w, o) for w, t in targets
                if (o := get_overlay(t, OVERLAY_NAMESPACE, OVERLAY_JOB, kinds=_KINDS))]
    if not overlays:
        return
    doc: dict[str, Any] = {
        "submission_id": req.submission_id,
        "entrypoint": req.entrypoint,
        "runtime_env": req.runtime_env,
        "metadata": req.metadata,
        "entrypoint_num_cpus": req.entrypoint_num_cpus,
    }
    for where, overlay in overlays:
        _apply_checked(doc, overlay, _JOB_FIXED, f"{where}: ray {OVERLAY_JOB}")
    del doc["submission_id"]
    req.entrypoint = str(doc.pop("entrypoint"))
    req.runtime_env = dict(doc.pop("runtime_env", None) or {})
    req.metadata = {str(k): str(v) for k, v in (doc.pop("metadata", None) or {}).items()}
    req.entrypoint_num_cpus = float(doc.pop("entrypoint_num_cpus", 0.0) or 0.0)
    req.extra = doc


def request_doc(req: RayJobRequest) -> dict[str, Any]:
    """The request as a plain document, secret-looking env values masked (for dry-runs and
    golden files).

    Args:
        req: The request.

    Returns:
        A JSON-able dict.
    """
    plan = dict(req.plan)
    plan["replicas"] = [{**r, "env": mask_env(r["env"])} for r in req.plan.get("replicas", [])]
    env = dict(req.runtime_env)
    env["env_vars"] = mask_env(env.get("env_vars", {}))
    return {
        "submission_id": req.submission_id,
        "entrypoint": req.entrypoint,
        "entrypoint_num_cpus": req.entrypoint_num_cpus,
        "runtime_env": env,
        "metadata": req.metadata,
        "plan": plan,
        **req.extra,
    }


def format_request(req: RayJobRequest) -> str:
    """Renders the request readably (JSON, secrets masked).

    Args:
        req: The request.

    Returns:
        The text.
    """
    return json.dumps(request_doc(req), indent=2, sort_keys=True)
