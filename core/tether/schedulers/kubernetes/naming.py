"""Names, labels and annotations of the objects tether creates on Kubernetes.

The contract between rendering (:mod:`tether.schedulers.kubernetes.render`) and reading the
objects back (:mod:`tether.schedulers.kubernetes.status`): the label and annotation keys, the
API groups of the custom resources, the naming rules of apps, replicas, Jobs and ports, and the
labels and annotations every object of an app carries. Pure functions, no I/O.

Every name and label value is valid Kubernetes whatever the AppDef says: names are
sanitized, truncated and, when changed, suffixed with a short hash of the original so that
two different inputs never collide.
"""

from __future__ import annotations

import hashlib
import re

from tether.schedulers.ids import AppIdRule
from tether.schedulers.kubernetes.options import KubernetesOpts
from tether.specs import AppDef

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
"""Set by tether when it stops an object: ``cancelled``, ``failed``, ``superseded`` or
``disrupted`` (its pod was deleted under it, see :mod:`~.disruption`)."""
ANN_STOP_REASON = "tether.dev/stop-reason"
ANN_POD = "tether.dev/pod"
"""A Job's pod of record, ``POD@NODE``: the one pod tether saw it run (see :mod:`~.disruption`)."""
ANN_FAILURE = "tether.dev/failure"
"""Why tether stopped a disrupted Job: ``{"cause": ..., "reason": ...}`` (JSON)."""
ANN_SUBMITTED = "tether.dev/submitted"
"""Submission time in seconds since the epoch (microseconds), set by ``schedule``: the
``creationTimestamp`` has one-second resolution, too coarse to order two submissions of one
job key (``find_jobs`` is oldest first)."""

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

SHM_VOLUME = "dshm"
MOUNT_VOLUME_PREFIX = "mount-"
DEVICE_VOLUME_PREFIX = "device-"

# ---- API groups ------------------------------------------------------------------------
JOB_API_VERSION = "batch/v1"
VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
VOLCANO_BUS_GROUP, VOLCANO_BUS_VERSION = "bus.volcano.sh", "v1alpha1"
APPWRAPPER_GROUP, APPWRAPPER_VERSION, APPWRAPPER_PLURAL = "mcad.ibm.com", "v1beta1", "appwrappers"

MAX_NAME = 63
APP_BASE_MAX = 32
"""Longest sanitized AppDef name kept in the Kubernetes app name (a 6-char suffix follows)."""

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
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
    if DNS_LABEL.match(text) and len(text) <= max_len:
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


APP_NAME_RULE = AppIdRule(max_base=APP_BASE_MAX, suffix_len=6, allowed="a-z0-9-", squeeze=True,
                          hash_cut=True, letter_prefix="t-", empty="")
"""The unique Kubernetes name of one submission: a DNS-1035 label (a letter first, so it can
also name the headless Service) of at most ``APP_BASE_MAX + 7`` characters."""


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
    if sep and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= MAX_NAME and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value."""
    return len(value) <= MAX_NAME and bool(_LABEL_VALUE.match(value))


def port_name(name: str, port: int, taken: set[str]) -> str:
    """A valid, unused port name (at most 15 characters) for port ``name``; added to ``taken``.

    Args:
        name: The role's name of the port (any characters).
        port: The port number (names the port when ``name`` cannot).
        taken: The names already used in the same object.

    Returns:
        The name.
    """
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


# ---- labels and annotations of an app ------------------------------------------------------
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


