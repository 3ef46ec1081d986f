"""Kubernetes manifests from an :class:`~tether.specs.AppDef`: pure functions, golden-tested.

:func:`render` turns an app plus :class:`~tether.schedulers.kubernetes.options.KubernetesOpts`
into a :class:`KubernetesRequest` (a list of manifest dicts); nothing here talks to a cluster or
imports the ``kubernetes`` package, so ``--dryrun`` works offline. The scheduler module
(:mod:`tether.schedulers.kubernetes.scheduler`) explains the design; this module holds the
naming rules, the labels, and the shapes of the objects:

* ``gang=none``/``kueue``: one ``batch/v1`` Job per replica, plus a headless Service when the
  app has more than one replica;
* ``gang=volcano``: one ``batch.volcano.sh/v1alpha1`` Job with one task per replica;
* ``gang=appwrapper``: one ``mcad.ibm.com/v1beta1`` AppWrapper wrapping the Jobs and Service.

Every name and label value is valid Kubernetes whatever the AppDef says: names are
sanitized, truncated and, when changed, suffixed with a short hash of the original so that
two different inputs never collide.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tether.schedulers.api import JOB_KEY
from tether.schedulers.kubernetes.options import (
    GANG_APPWRAPPER,
    GANG_KUEUE,
    GANG_NONE,
    GANG_OPTIONS,
    GANG_VOLCANO,
    KubernetesOpts,
)
from tether.schedulers.replica import materialize
from tether.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)
from tether.specs.overlays import apply_overlay, get_overlay
from tether.specs.secrets import MASK, is_secret_name

# ---- labels and annotations (the contract between render and describe) ------------------
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tether"
LABEL_APP_ID = "tether.dev/app-id"
LABEL_ROLE = "tether.dev/role"
LABEL_REPLICA_ID = "tether.dev/replica-id"
LABEL_JOB_KEY = "tether.dev/job-key"
LABEL_ATTEMPT = "tether.dev/attempt"

ANN_APP_ID = "tether.dev/app-id"
ANN_APP_NAME = "tether.dev/app-name"
ANN_JOB_KEY = "tether.dev/job-key"
ANN_GANG = "tether.dev/gang"
ANN_NUM_RESTARTS = "tether.dev/num-restarts"
ANN_IMAGE_PULL_TIMEOUT = "tether.dev/image-pull-timeout"
ANN_UI_URL = "tether.dev/ui-url"
ANN_ROLE_NAME = "tether.dev/role-name"
ANN_ROLE_INDEX = "tether.dev/role-index"
ANN_NUM_REPLICAS = "tether.dev/num-replicas"
ANN_MIN_REPLICAS = "tether.dev/min-replicas"
ANN_MAX_RETRIES = "tether.dev/max-retries"
ANN_RETRY_POLICY = "tether.dev/retry-policy"
ANN_PORT_NAMES = "tether.dev/port-names"
ANN_STOPPED = "tether.dev/stopped"
"""Set by tether when it stops an object: ``cancelled``, ``failed`` or ``superseded``."""
ANN_STOP_REASON = "tether.dev/stop-reason"
ANN_SUBMITTED = "tether.dev/submitted"
"""Submission time in seconds since the epoch (microseconds), set by ``schedule``: the
``creationTimestamp`` has one-second resolution, too coarse to order two submissions of one
job key (``find_jobs`` is oldest first)."""

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


OVERLAY_NAMESPACE = "kubernetes"
OVERLAY_KIND = "V1Pod"
"""Overlays stored with ``set_overlay(role, "kubernetes", "V1Pod", ...)`` merge into each
replica's pod template (``metadata``/``spec``; the role's container is named after the role)."""

SHM_VOLUME = "dshm"
MOUNT_VOLUME_PREFIX = "mount-"
DEVICE_VOLUME_PREFIX = "device-"

# ---- API groups ------------------------------------------------------------------------
JOB_API_VERSION = "batch/v1"
VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
VOLCANO_BUS_GROUP, VOLCANO_BUS_VERSION = "bus.volcano.sh", "v1alpha1"
APPWRAPPER_GROUP, APPWRAPPER_VERSION, APPWRAPPER_PLURAL = "mcad.ibm.com", "v1beta1", "appwrappers"


IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

MAX_NAME = 63
APP_BASE_MAX = 32
"""Longest sanitized AppDef name kept in the Kubernetes app name (a 6-char suffix follows)."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


# ---- names ---------------------------------------------------------------------------------
def short_hash(text: str, n: int = 8) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``text`` (stable across runs)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _dns_chars(text: str) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    return re.sub(r"-{2,}", "-", out).strip("-")


def _fit(text: str, original: str, max_len: int) -> str:
    """Cuts ``text`` to ``max_len``, adding a hash of ``original`` when it was cut."""
    if len(text) <= max_len:
        return text
    head = text[: max_len - 9].rstrip("-.")
    return f"{head}-{short_hash(original)}"


def dns_label(text: str, max_len: int = MAX_NAME) -> str:
    """A valid DNS-1123 label derived from ``text`` (a valid label of ``max_len`` stays as is).

    Args:
        text: Any string.
        max_len: The longest result.

    Returns:
        Lowercase letters, digits and ``-``; a hash of ``text`` is appended when characters
        had to be replaced or the result had to be cut, so distinct inputs stay distinct.
    """
    if _DNS_LABEL.match(text) and len(text) <= max_len:
        return text
    clean = _dns_chars(text) or "x"
    return _fit(f"{clean[: max_len - 9].rstrip('-')}-{short_hash(text)}", text, max_len)


def k8s_name(*parts: str, max_len: int = MAX_NAME) -> str:
    """Joins already-clean name parts with ``-``, cut to ``max_len`` with a hash when needed.

    Args:
        *parts: DNS-label parts.
        max_len: The longest result.

    Returns:
        The name.
    """
    full = "-".join(p for p in parts if p)
    return _fit(full, full, max_len)


def make_app_name(app_name: str, suffix: str) -> str:
    """The unique Kubernetes name of one submission: ``<sanitized app name>-<suffix>``.

    The result is a DNS-1035 label (starts with a letter), so it can also name the headless
    Service, and is at most ``APP_BASE_MAX + 1 + len(suffix)`` characters.

    Args:
        app_name: ``AppDef.name`` (any characters, any length).
        suffix: A short random string unique to the submission (lowercase letters/digits).

    Returns:
        The name.
    """
    base = _dns_chars(app_name)
    if len(base) > APP_BASE_MAX:
        base = base[: APP_BASE_MAX - 7].rstrip("-") + "-" + short_hash(app_name, 6)
    if not base or not base[0].isalpha():
        base = ("t-" + base)[:APP_BASE_MAX].rstrip("-")
    return f"{base}-{suffix}"


def role_slug(role_name: str) -> str:
    """The DNS-label form of a role name, at most 20 characters (used in object names)."""
    return dns_label(role_name, 20)


def replica_hostname(app_name: str, role_name: str, replica_id: int) -> str:
    """The stable hostname of a replica; also the name of its first Job.

    Args:
        app_name: The Kubernetes app name.
        role_name: The role's name.
        replica_id: The replica index.

    Returns:
        ``<app>-<role>-<k>``, at most 63 characters.
    """
    return k8s_name(app_name, role_slug(role_name), str(replica_id))


def job_name(app_name: str, role_name: str, replica_id: int, attempt: int = 0) -> str:
    """The name of the Job running attempt ``attempt`` of a replica.

    Attempt 0 is the replica's hostname; tether-side restarts (``APPLICATION`` and ``ROLE``
    retry policies) create ``<hostname>-r<attempt>``.

    Args:
        app_name: The Kubernetes app name.
        role_name: The role's name.
        replica_id: The replica index.
        attempt: How many times tether restarted this replica.

    Returns:
        The Job's name, at most 63 characters.
    """
    if attempt == 0:
        return replica_hostname(app_name, role_name, replica_id)
    suffix = f"-r{attempt}"
    base = k8s_name(
        app_name, role_slug(role_name), str(replica_id), max_len=MAX_NAME - len(suffix)
    )
    return base + suffix


def volcano_task_name(role_name: str, replica_id: int) -> str:
    """The Volcano task name of a replica."""
    return k8s_name(role_slug(role_name), str(replica_id))


def label_value(text: str) -> str:
    """A valid label value derived from ``text`` (valid values are kept as they are).

    Args:
        text: Any string.

    Returns:
        At most 63 characters of letters, digits, ``-``, ``_`` and ``.``, starting and
        ending with a letter or digit; a hash of ``text`` is appended when it had to change.
    """
    if len(text) <= MAX_NAME and _LABEL_VALUE.match(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return f"{clean[: MAX_NAME - 9].rstrip('-_.')}-{short_hash(text)}".lstrip("-")


def is_label_key(key: str) -> bool:
    """Whether ``key`` is a valid label/annotation key (``[prefix/]name``)."""
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= MAX_NAME and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value."""
    return len(value) <= MAX_NAME and bool(_LABEL_VALUE.match(value))


def _port_name(name: str, port: int, taken: set[str]) -> str:
    cand = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", name.lower())).strip("-")[:15]
    cand = cand.rstrip("-")
    if not cand or not _PORT_NAME.match(cand) or not re.search("[a-z]", cand) or cand in taken:
        cand = f"p{port}"[:15]
    n = 1
    base = cand
    while cand in taken:
        cand = f"{base[:12]}-{n}"
        n += 1
    taken.add(cand)
    return cand


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
    if not _DNS_LABEL.match(opts.namespace or ""):
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
        if not _DNS_SUBDOMAIN.match(secret):
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
            if not ref.key or not _DNS_SUBDOMAIN.match(ref.name):
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


# ---- resources -----------------------------------------------------------------------------
def _reserve(amount: int, reserve: int) -> int:
    """``amount - reserve``, but never less than half of ``amount`` (and never below 1)."""
    return max(amount - reserve, (amount + 1) // 2, 1)


def container_resources(res: Resource, opts: KubernetesOpts) -> dict[str, dict[str, str]]:
    """Requests and limits of one container.

    Limits are the resource as asked. CPU and memory requests subtract the reserve for
    system daemons (``reserved_millicpu``/``reserved_memory_mb``) so that a named resource
    sized as a whole instance still fits on that instance; the reserve is capped at half
    the amount, so a request is never zero or negative. ``-1`` (the default resource) and
    ``0`` ask for nothing. GPUs and ``devices`` are extended resources (request = limit).

    Args:
        res: The role's resource.
        opts: The run options.

    Returns:
        ``{"requests": {...}, "limits": {...}}`` (empty dicts dropped).
    """
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpu > 0:
        milli = max(1, round(res.cpu * 1000))
        limits["cpu"] = f"{milli}m"
        requests["cpu"] = f"{_reserve(milli, opts.reserved_millicpu)}m"
    if res.memMB > 0:
        mem = max(1, int(res.memMB))
        limits["memory"] = f"{mem}Mi"
        requests["memory"] = f"{_reserve(mem, opts.reserved_memory_mb)}Mi"
    extended: dict[str, int] = {}
    if res.gpu > 0:
        extended[opts.gpu_resource] = res.gpu
    for dev, count in res.devices.items():
        if count > 0:
            extended[dev] = extended.get(dev, 0) + count
    for name, count in extended.items():
        requests[name] = limits[name] = str(count)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def resolve_image(image: str, image_repo: str | None) -> str:
    """Prefixes ``image_repo`` to an image that names no registry.

    Args:
        image: E.g. ``trainer:1`` or ``ghcr.io/org/trainer:1``.
        image_repo: E.g. ``registry.example.com/team``; None keeps images as they are.

    Returns:
        The image to run.
    """
    if not image_repo:
        return image
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"{image_repo.rstrip('/')}/{image}"


# ---- objects -------------------------------------------------------------------------------
@dataclass
class KubernetesRequest:
    """The native request of the kubernetes scheduler: the manifests to create, in order.

    Attributes:
        namespace: Where everything is created.
        name: The app's Kubernetes name (unique per submission).
        gang: The gang option the manifests were rendered for.
        manifests: Object dicts (camelCase, as ``kubectl apply`` takes them).
        job_key: The caller's job identity, if any.
        context: The kubeconfig context to submit to (None: the scheduler's).
    """

    namespace: str
    name: str
    gang: str
    manifests: list[dict[str, Any]]
    job_key: str | None = None
    context: str | None = None

    @property
    def app_id(self) -> str:
        """``{namespace}:{name}``."""
        return f"{self.namespace}:{self.name}"


def _mask(obj: Any) -> Any:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k == "env" and isinstance(v, list):
                out[k] = [
                    {**e, "value": MASK}
                    if isinstance(e, dict) and is_secret_name(str(e.get("name", ""))) and
                    e.get("value")
                    else e
                    for e in v
                ]
            else:
                out[k] = _mask(v)
        return out
    if isinstance(obj, list):
        return [_mask(v) for v in obj]
    return obj


def format_request(req: KubernetesRequest) -> str:
    """The request as multi-document YAML, with secret-looking env values masked.

    Args:
        req: The request.

    Returns:
        The YAML text.
    """
    return yaml.safe_dump_all(
        [_mask(m) for m in req.manifests],
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )


def app_labels(name: str, job_key: str | None, opts: KubernetesOpts) -> dict[str, str]:
    """Labels on every object of an app."""
    labels = dict(opts.labels or {})
    labels[LABEL_MANAGED_BY] = MANAGED_BY
    labels[LABEL_APP_ID] = name
    if job_key:
        labels[LABEL_JOB_KEY] = label_value(job_key)
    return labels


def app_annotations(
    app: AppDef, name: str, job_key: str | None, opts: KubernetesOpts
) -> dict[str, str]:
    """Annotations on the top-level objects of an app (what describe and list read)."""
    ann = dict(opts.annotations or {})
    ann[ANN_APP_ID] = f"{opts.namespace}:{name}"
    ann[ANN_APP_NAME] = app.name
    ann[ANN_GANG] = opts.gang
    ann[ANN_NUM_RESTARTS] = "0"
    ann[ANN_IMAGE_PULL_TIMEOUT] = str(opts.image_pull_timeout)
    if job_key:
        ann[ANN_JOB_KEY] = job_key
    if opts.dashboard_url:
        ann[ANN_UI_URL] = opts.dashboard_url.format(namespace=opts.namespace, name=name)
    return ann


def _role_annotations(role: Role, role_idx: int, port_names: dict[str, str]) -> dict[str, str]:
    ann = {
        ANN_ROLE_NAME: role.name,
        ANN_ROLE_INDEX: str(role_idx),
        ANN_NUM_REPLICAS: str(role.num_replicas),
        ANN_MAX_RETRIES: str(role.max_retries),
        ANN_RETRY_POLICY: role.retry_policy.value,
    }
    if role.min_replicas is not None:
        ann[ANN_MIN_REPLICAS] = str(role.min_replicas)
    renamed = {k: v for k, v in port_names.items() if k != v}
    if renamed:
        ann[ANN_PORT_NAMES] = ",".join(f"{v}={k}" for k, v in renamed.items())
    return ann


def _volumes(role: Role) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    privileged = False
    if not any(getattr(m, "dst_path", None) == "/dev/shm" for m in role.mounts):
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    for i, m in enumerate(role.mounts):
        if isinstance(m, BindMount):
            vol = f"{MOUNT_VOLUME_PREFIX}{i}"
            volumes.append({"name": vol, "hostPath": {"path": m.src_path}})
            mounts.append({"name": vol, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, VolumeMount):
            vol = f"{MOUNT_VOLUME_PREFIX}{i}"
            volumes.append(
                {
                    "name": vol,
                    "persistentVolumeClaim": {"claimName": m.src, "readOnly": m.read_only},
                }
            )
            mounts.append({"name": vol, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, DeviceMount):
            vol = f"{DEVICE_VOLUME_PREFIX}{i}"
            volumes.append({"name": vol, "hostPath": {"path": m.src_path}})
            mounts.append(
                {"name": vol, "mountPath": m.dst_path, "readOnly": "w" not in m.permissions}
            )
            privileged = True
    return volumes, mounts, privileged


def secret_env(role: Role) -> list[dict[str, Any]]:
    """The role's :attr:`~tether.specs.Role.secrets` as env ``valueFrom.secretKeyRef`` entries.

    The values stay in the cluster's Secrets: the manifest names only the Secret and key.

    Args:
        role: The role.

    Returns:
        One env entry per secret variable.
    """
    return [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        for var, ref in role.secrets.items()
    ]


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
    if not sep or kind not in ENV_FROM_KINDS or not _DNS_SUBDOMAIN.match(name.strip()):
        raise ValueError(
            f"env_from: {entry!r} is not allowed; use 'secret:NAME' or 'configmap:NAME' "
            "(NAME a Secret or ConfigMap of the namespace)"
        )
    return kind, name.strip()


def render_env_from(entries: Iterable[str] | None) -> list[dict[str, Any]]:
    """The container's ``envFrom``: every key of the named Secrets and ConfigMaps as env.

    Args:
        entries: ``secret:NAME`` / ``configmap:NAME`` entries.

    Returns:
        The ``envFrom`` list.
    """
    out: list[dict[str, Any]] = []
    for entry in entries or []:
        kind, name = parse_env_from(entry)
        out.append({ENV_FROM_KINDS[kind]: {"name": name}})
    return out


def render_pod_template(
    app: AppDef,
    role: Role,
    role_idx: int,
    replica_id: int,
    name: str,
    opts: KubernetesOpts,
    *,
    rank0_host: str,
    subdomain: str | None,
    job_key: str | None,
) -> dict[str, Any]:
    """The pod template of one replica (macros substituted, identity set).

    Args:
        app: The app.
        role: The role (unsubstituted).
        role_idx: Its index in ``app.roles``.
        replica_id: The replica index.
        name: The Kubernetes app name.
        opts: The run options.
        rank0_host: Address of replica 0 of the first role (``$TETHER_RANK0_HOST``).
        subdomain: The headless Service's name, when there is one.
        job_key: The caller's job identity, if any.

    Returns:
        ``{"metadata": ..., "spec": ...}``.
    """
    rep = materialize(
        role, app_id=f"{opts.namespace}:{name}", replica_id=replica_id, rank0_host=rank0_host
    )
    env = rep.env
    taken: set[str] = set()
    port_names = {p: _port_name(p, port, taken) for p, port in rep.port_map.items()}
    volumes, volume_mounts, privileged = _volumes(rep)
    container: dict[str, Any] = {
        "name": role_slug(role.name),
        "image": resolve_image(rep.image, opts.image_repo),
        "command": [rep.entrypoint, *rep.args],
        "env": [{"name": k, "value": v} for k, v in env.items() if k not in role.secrets]
        + secret_env(role),
    }
    env_from = render_env_from(opts.env_from)
    if env_from:
        container["envFrom"] = env_from
    if opts.image_pull_policy:
        container["imagePullPolicy"] = opts.image_pull_policy
    resources = container_resources(rep.resource, opts)
    if resources:
        container["resources"] = resources
    if rep.port_map:
        container["ports"] = [
            {"name": port_names[p], "containerPort": port, "protocol": "TCP"}
            for p, port in rep.port_map.items()
        ]
    container["volumeMounts"] = volume_mounts
    if privileged:
        container["securityContext"] = {"privileged": True}

    labels = app_labels(name, job_key, opts)
    labels[LABEL_ROLE] = role_slug(role.name)
    labels[LABEL_REPLICA_ID] = str(replica_id)
    annotations = dict(opts.annotations or {})
    annotations.update(_role_annotations(role, role_idx, port_names))

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": replica_hostname(name, role.name, replica_id),
    }
    if subdomain:
        spec["subdomain"] = subdomain
    spec["enableServiceLinks"] = False
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    scheduler_name = opts.scheduler_name or ("volcano" if opts.gang == GANG_VOLCANO else None)
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
    selector = {str(k): str(v) for k, v in rep.resource.capabilities.items()}
    selector.update(opts.node_selector or {})
    if selector:
        spec["nodeSelector"] = selector
    if opts.tolerations:
        spec["tolerations"] = [parse_toleration(t) for t in opts.tolerations]
    spec["containers"] = [container]
    spec["volumes"] = volumes
    pod: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}
    # Overlays last: the platform team's escape hatch wins over everything tether rendered.
    apply_overlay(pod, get_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND))
    return pod


def render_service(
    app: AppDef, name: str, opts: KubernetesOpts, job_key: str | None
) -> dict[str, Any]:
    """The headless Service that gives every replica a DNS name ``<hostname>.<name>``."""
    ports: list[dict[str, Any]] = []
    seen: set[int] = set()
    taken: set[str] = set()
    for role in app.roles:
        for pname, port in role.port_map.items():
            if port in seen:
                continue
            seen.add(port)
            ports.append(
                {"name": _port_name(pname, port, taken), "port": port, "targetPort": port,
                 "protocol": "TCP"}
            )
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP_ID: name},
    }
    if ports:
        spec["ports"] = ports
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def render_job(
    app: AppDef,
    role: Role,
    replica_id: int,
    name: str,
    opts: KubernetesOpts,
    template: dict[str, Any],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``batch/v1`` Job running one replica (attempt 0).

    ``backoffLimit`` is ``max_retries`` for the ``REPLICA`` retry policy (Kubernetes retries
    the pod) and 0 otherwise (tether restarts the role or the app, see the scheduler).
    """
    labels = app_labels(name, job_key, opts)
    labels[LABEL_ROLE] = role_slug(role.name)
    labels[LABEL_REPLICA_ID] = str(replica_id)
    labels[LABEL_ATTEMPT] = "0"
    if opts.gang == GANG_KUEUE and opts.queue:
        labels[KUEUE_QUEUE_LABEL] = opts.queue
    backoff = role.max_retries if role.retry_policy == RetryPolicy.REPLICA else 0
    spec: dict[str, Any] = {
        "backoffLimit": backoff,
        "completions": 1,
        "parallelism": 1,
    }
    if opts.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = opts.ttl_seconds_after_finished
    if opts.gang == GANG_KUEUE:
        spec["suspend"] = True
    spec["template"] = template
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": job_name(name, role.name, replica_id),
            "namespace": opts.namespace,
            "labels": labels,
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def _min_available(app: AppDef) -> int:
    return sum(r.num_replicas if r.min_replicas is None else r.min_replicas for r in app.roles)


def _volcano_policies(role: Role) -> list[dict[str, str]]:
    if role.max_retries <= 0:
        return [{"event": "PodFailed", "action": "TerminateJob"}]
    if role.retry_policy == RetryPolicy.REPLICA:
        return [{"event": "PodFailed", "action": "RestartTask"}]
    # APPLICATION, and ROLE (Volcano cannot restart a subset of tasks: the whole job it is)
    return [
        {"event": "PodFailed", "action": "RestartJob"},
        {"event": "PodEvicted", "action": "RestartJob"},
    ]


def render_volcano_job(
    app: AppDef,
    name: str,
    opts: KubernetesOpts,
    templates: list[tuple[Role, int, dict[str, Any]]],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``batch.volcano.sh/v1alpha1`` Job: one task per replica, gang of ``minAvailable``."""
    tasks = []
    for role, k, template in templates:
        task: dict[str, Any] = {
            "name": volcano_task_name(role.name, k),
            "replicas": 1,
            "template": template,
            "policies": _volcano_policies(role),
        }
        if role.max_retries > 0:
            task["maxRetry"] = role.max_retries
        tasks.append(task)
    spec: dict[str, Any] = {
        "schedulerName": opts.scheduler_name or "volcano",
        "queue": opts.queue or "default",
        "minAvailable": _min_available(app),
        "maxRetry": max([r.max_retries for r in app.roles] + [0]),
    }
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    spec["tasks"] = tasks
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def render_appwrapper(
    app: AppDef,
    name: str,
    opts: KubernetesOpts,
    items: list[dict[str, Any]],
    job_key: str | None,
) -> dict[str, Any]:
    """One ``mcad.ibm.com/v1beta1`` AppWrapper holding the Service and the Jobs.

    MCAD dispatches the wrapped objects only when the whole app fits (``minAvailable`` pods);
    ``APPLICATION``/``ROLE`` retries become AppWrapper requeuing.
    """
    generic: list[dict[str, Any]] = []
    for obj in items:
        item: dict[str, Any] = {"replicas": 1, "generictemplate": obj}
        if obj["kind"] == "Job":
            res = obj["spec"]["template"]["spec"]["containers"][0].get("resources", {})
            item["custompodresources"] = [
                {
                    "replicas": 1,
                    "requests": dict(res.get("requests", {})),
                    "limits": dict(res.get("limits", {})),
                }
            ]
        generic.append(item)
    spec: dict[str, Any] = {
        "schedulingSpec": {"minAvailable": _min_available(app)},
        "resources": {"GenericItems": generic},
    }
    requeues = max(
        [r.max_retries for r in app.roles if r.retry_policy != RetryPolicy.REPLICA] + [0]
    )
    if requeues > 0:
        spec["schedulingSpec"]["requeuing"] = {
            "timeInSeconds": 60,
            "maxTimeInSeconds": 0,
            "growthType": "exponential",
            "maxNumRequeuings": requeues,
        }
    return {
        "apiVersion": f"{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}",
        "kind": "AppWrapper",
        "metadata": {
            "name": name,
            "namespace": opts.namespace,
            "labels": app_labels(name, job_key, opts),
            "annotations": app_annotations(app, name, job_key, opts),
        },
        "spec": spec,
    }


def rank0_address(app: AppDef, name: str, opts: KubernetesOpts, with_service: bool) -> str:
    """Where replica 0 of the first role is reachable from every replica.

    Returns:
        Its DNS name under the headless Service, or ``localhost`` for a one-replica app.
    """
    if not with_service:
        return "localhost"
    host = replica_hostname(name, app.roles[0].name, 0)
    return f"{host}.{name}.{opts.namespace}.svc.{opts.cluster_domain}"


def render(app: AppDef, opts: KubernetesOpts, name: str) -> KubernetesRequest:
    """Renders an app into the manifests of one submission.

    Args:
        app: The (validated) app; ``app.metadata["tether.job_key"]`` is the job identity.
        opts: The run options.
        name: The app's Kubernetes name (see :func:`make_app_name`).

    Returns:
        The request: Service first (when there is one), then the Jobs, the Volcano Job or
        the AppWrapper.

    Raises:
        ValueError: For options or an app the scheduler cannot run.
    """
    check_opts(opts)
    check_app(app)
    job_key = app.metadata.get(JOB_KEY) or None
    with_service = sum(r.num_replicas for r in app.roles) > 1
    rank0 = rank0_address(app, name, opts, with_service)
    subdomain = name if with_service else None
    templates: list[tuple[Role, int, dict[str, Any]]] = []
    for role_idx, role in enumerate(app.roles):
        for k in range(role.num_replicas):
            tpl = render_pod_template(
                app, role, role_idx, k, name, opts,
                rank0_host=rank0, subdomain=subdomain, job_key=job_key,
            )  # fmt: skip
            templates.append((role, k, tpl))
    manifests: list[dict[str, Any]] = []
    if with_service:
        manifests.append(render_service(app, name, opts, job_key))
    if opts.gang == GANG_VOLCANO:
        manifests.append(render_volcano_job(app, name, opts, templates, job_key))
    else:
        jobs = [render_job(app, r, k, name, opts, t, job_key) for r, k, t in templates]
        if opts.gang == GANG_APPWRAPPER:
            manifests = [render_appwrapper(app, name, opts, manifests + jobs, job_key)]
        else:
            manifests.extend(jobs)
    return KubernetesRequest(opts.namespace, name, opts.gang, manifests, job_key, opts.context)


def manifest_summary(manifests: list[Mapping[str, Any]]) -> list[str]:
    """``Kind/name`` of each manifest (for messages)."""
    return [f"{m.get('kind')}/{m.get('metadata', {}).get('name')}" for m in manifests]
