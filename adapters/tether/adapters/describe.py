"""What adapters show about an app, with its secrets masked by the one secret policy.

:func:`app_secrets` collects the values an app's roles mark as secret, :func:`mask_app_text`
masks them in any text about the app (a message, a rendered request), :func:`describe_app`
summarizes an AppDef for dry-runs and artifacts, and :func:`render_dryrun` renders the
scheduler layer of a dry-run, to which each adapter adds its own layer.

Only the public API of ``tether.runner`` and ``tether.specs`` is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.runner import Runner, get_runner
from tether.specs import AppDef, AppDryRunInfo, CfgVal, mask_args, mask_env
from tether.specs.secrets import app_secret_values, mask_text


def app_secrets(app: AppDef | None) -> list[str]:
    """Every value the app's roles mark as secret (env and args), to mask text about the app.

    Args:
        app: The app (None: no values).

    Returns:
        The values, longest first (see :func:`tether.specs.secrets.app_secret_values`).
    """
    return app_secret_values(app.roles) if app is not None else []


def mask_app_text(app: AppDef | None, text: str, extra: list[str] | None = None) -> str:
    """Masks text about an app (a message, a rendered request) by the one secret policy.

    Args:
        app: The app whose env and args values are secret where they look so.
        text: The text.
        extra: More values known to be secret.

    Returns:
        The masked text.
    """
    return mask_text(text, [*app_secrets(app), *(extra or [])])


def describe_app(app: AppDef) -> dict[str, Any]:
    """A printable summary of an AppDef with secrets masked (for dry-runs and artifacts).

    Args:
        app: The app.

    Returns:
        Name, and per role: image, command and env (both masked), replicas, resources,
        retries.
    """
    secrets = app_secrets(app)
    return {
        "name": app.name,
        "roles": [
            {
                "name": r.name,
                "image": r.image,
                "command": mask_args([r.entrypoint, *r.args], secrets),
                "num_replicas": r.num_replicas,
                "min_replicas": r.min_replicas,
                "resource": {"cpu": r.resource.cpu, "gpu": r.resource.gpu,
                             "memMB": r.resource.memMB, "devices": dict(r.resource.devices)},
                "env": {k: mask_text(v, secrets) for k, v in mask_env(r.env).items()},
                "secrets": {k: str(ref) for k, ref in r.secrets.items()},
                "max_retries": r.max_retries,
                "retry_policy": r.retry_policy.value,
                "mounts": [mask_text(repr(m), secrets) for m in r.mounts],
            }
            for r in app.roles
        ],
    }


def render_dryrun(
    app: AppDef,
    scheduler: str,
    cfg: Mapping[str, CfgVal] | None = None,
    runner: Runner | None = None,
) -> tuple[dict[str, Any], AppDryRunInfo[Any]]:
    """Renders the backend layer of a dry-run: the AppDef summary and the native request.

    Args:
        app: The app.
        scheduler: The scheduler.
        cfg: Run options.
        runner: A runner to use (one is created and closed otherwise).

    Returns:
        The AppDef summary and the scheduler's dry-run info (``str()`` is redacted).
    """
    own = runner is None
    r = runner or get_runner()
    try:
        info = r.dryrun(app, scheduler, cfg)
    finally:
        if own:
            r.close()
    return describe_app(app), info
