"""Checks of the run options and of the AppDef that only Kubernetes needs.

:func:`check_opts` and :func:`check_app` run before rendering (and in ``_validate``); they
name the option or role field, the value and what is allowed. The option strings that need
parsing (tolerations, ``env_from`` entries) are parsed here too. Pure functions, no I/O.
"""

from __future__ import annotations

import difflib
from typing import Any

from tether.schedulers.kubernetes.naming import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    is_label_key,
    is_label_value,
    role_slug,
)
from tether.schedulers.kubernetes.options import (
    GANG_APPWRAPPER,
    GANG_KUEUE,
    GANG_NONE,
    GANG_OPTIONS,
    IMAGE_PULL_POLICIES,
    KubernetesOpts,
)
from tether.specs import AppDef

TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# ---- options checks ------------------------------------------------------------------------
def _close(value: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_toleration(spec: str) -> dict[str, Any]:
    """Parses a toleration written ``key[=value][:Effect]`` (``Exists`` when no value).

    Args:
        spec: E.g. ``nvidia.com/gpu:NoSchedule`` or ``dedicated=ml:NoExecute``.

    Returns:
        The toleration object.

    Raises:
        ValueError: For an empty key or an unknown effect.
    """
    body, sep, effect = spec.rpartition(":")
    if not sep:
        body, effect = spec, ""
    key, eq, value = body.partition("=")
    key = key.strip()
    if not key or not is_label_key(key):
        raise ValueError(
            f"toleration {spec!r}: {key!r} is not a valid taint key; write "
            "key[=value][:effect], e.g. nvidia.com/gpu:NoSchedule or dedicated=ml:NoExecute"
        )
    tol: dict[str, Any] = {"key": key}
    if eq:
        tol["operator"] = "Equal"
        tol["value"] = value.strip()
    else:
        tol["operator"] = "Exists"
    if effect:
        if effect not in TOLERATION_EFFECTS:
            raise ValueError(
                f"toleration {spec!r}: unknown effect {effect!r}"
                f"{_close(effect, TOLERATION_EFFECTS)} (allowed: {', '.join(TOLERATION_EFFECTS)})"
            )
        tol["effect"] = effect
    return tol


def check_opts(opts: KubernetesOpts) -> None:
    """Checks the run options that the type system does not.

    Args:
        opts: The options.

    Raises:
        ValueError: Naming the option, the allowed values and a close match.
    """
    errs: list[str] = []
    if opts.gang not in GANG_OPTIONS:
        errs.append(
            f"gang={opts.gang!r} is not a gang option{_close(opts.gang, GANG_OPTIONS)} "
            f"(allowed: {', '.join(GANG_OPTIONS)})"
        )
    if opts.gang == GANG_KUEUE and not opts.queue:
        errs.append("gang=kueue needs queue=<LocalQueue name> (the kueue.x-k8s.io/queue-name)")
    if opts.queue and opts.gang in (GANG_NONE, GANG_APPWRAPPER):
        errs.append(
            f"queue={opts.queue!r} is only used with gang=volcano or gang=kueue "
            f"(gang is {opts.gang!r})"
        )
    if not DNS_LABEL.match(opts.namespace or ""):
        errs.append(f"namespace={opts.namespace!r} is not a valid namespace name (a DNS label)")
    for fld in ("reserved_millicpu", "reserved_memory_mb", "image_pull_timeout",
                "ttl_seconds_after_finished"):
        if (getattr(opts, fld) or 0) < 0:
            errs.append(f"{fld} must be >= 0, got {getattr(opts, fld)}")
    if opts.image_pull_policy and opts.image_pull_policy not in IMAGE_PULL_POLICIES:
        errs.append(
            f"image_pull_policy={opts.image_pull_policy!r} is not allowed"
            f"{_close(opts.image_pull_policy, IMAGE_PULL_POLICIES)} "
            f"(allowed: {', '.join(IMAGE_PULL_POLICIES)})"
        )
    if not is_label_key(opts.gpu_resource):
        errs.append(f"gpu_resource={opts.gpu_resource!r} is not a resource name")
    for what, mapping in (("labels", opts.labels), ("node_selector", opts.node_selector)):
        for k, v in (mapping or {}).items():
            if not is_label_key(k):
                errs.append(f"{what}: {k!r} is not a valid label key")
            if not is_label_value(v):
                errs.append(f"{what}: value {v!r} of {k!r} is not a valid label value")
    for k in opts.annotations or {}:
        if not is_label_key(k):
            errs.append(f"annotations: {k!r} is not a valid annotation key")
    for tol in opts.tolerations or []:
        try:
            parse_toleration(tol)
        except ValueError as e:
            errs.append(str(e))
    for secret in opts.image_pull_secrets or []:
        if not DNS_SUBDOMAIN.match(secret):
            errs.append(f"image_pull_secrets: {secret!r} is not a valid Secret name")
    if opts.dashboard_url:
        try:
            opts.dashboard_url.format(namespace="ns", name="app")
        except (KeyError, IndexError, ValueError) as e:
            errs.append(
                f"dashboard_url={opts.dashboard_url!r} may only use {{namespace}} and {{name}} "
                f"({type(e).__name__}: {e})"
            )
    for entry in opts.env_from or []:
        try:
            parse_env_from(entry)
        except ValueError as e:
            errs.append(str(e))
    if errs:
        raise ValueError("invalid kubernetes run options:\n  - " + "\n  - ".join(errs))


def check_app(app: AppDef) -> None:
    """Checks what only Kubernetes needs (beyond the spec and the declared capabilities).

    Args:
        app: The app.

    Raises:
        ValueError: Naming the role and field.
    """
    errs: list[str] = []
    slugs: dict[str, str] = {}
    for role in app.roles:
        where = f"role {role.name!r}"
        for key in role.resource.capabilities:
            if not is_label_key(str(key)):
                errs.append(
                    f"{where}: capability {key!r} cannot be a node selector (not a label key)"
                )
        for dev in role.resource.devices:
            if not is_label_key(dev):
                errs.append(f"{where}: device {dev!r} is not an extended resource name")
        for var, ref in role.secrets.items():
            if not ref.key or not DNS_SUBDOMAIN.match(ref.name):
                errs.append(
                    f"{where}: secrets[{var!r}] = {ref} needs a Secret name (a DNS subdomain) "
                    "and a key: SecretRef('my-secret', 'password')"
                )
        slug = role_slug(role.name)
        if slug in slugs:
            errs.append(f"roles {slugs[slug]!r} and {role.name!r} map to the same name {slug!r}")
        slugs[slug] = role.name
    if errs:
        raise ValueError("invalid AppDef for kubernetes:\n  - " + "\n  - ".join(errs))


# ---- env_from ------------------------------------------------------------------------------
ENV_FROM_KINDS = {"secret": "secretRef", "configmap": "configMapRef"}


def parse_env_from(entry: str) -> tuple[str, str]:
    """Splits an ``env_from`` entry, ``secret:NAME`` or ``configmap:NAME``.

    Args:
        entry: The entry.

    Returns:
        ``(kind, name)`` with kind ``secret`` or ``configmap``.

    Raises:
        ValueError: Naming the entry and the allowed forms.
    """
    kind, sep, name = entry.partition(":")
    kind = kind.strip().lower().replace("_", "").replace("-", "")
    if not sep or kind not in ENV_FROM_KINDS or not DNS_SUBDOMAIN.match(name.strip()):
        raise ValueError(
            f"env_from: {entry!r} is not allowed; use 'secret:NAME' or 'configmap:NAME' "
            "(NAME a Secret or ConfigMap of the namespace)"
        )
    return kind, name.strip()
