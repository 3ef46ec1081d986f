"""What a tether job of an Airflow task carries about the task: labels, annotations, names.

On a scheduler with ``labels``/``annotations`` run options (Kubernetes), every job gets the
labels ``airflow-dag-id``, ``airflow-task-id``, ``airflow-run-id``, ``airflow-try-number`` and,
for a mapped task, ``airflow-map-index`` (values made label-safe), and the annotations
``tether.dev/airflow-*`` with the exact values. The task's own ``cfg`` wins on a clash.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from tether.specs import CfgVal

_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_safe(value: str) -> str:
    """A valid Kubernetes label value for ``value`` (63 characters at most).

    Args:
        value: Any text.

    Returns:
        The value itself when valid; else a readable cleaned prefix plus a short hash.
    """
    cleaned = _LABEL_UNSAFE.sub("-", value).strip("-_.")
    if cleaned == value and len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return (cleaned[:54].rstrip("-_.") + "-" + digest).lstrip("-_.")


def task_metadata(ti: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations of a task instance's job.

    Args:
        ti: The task instance (``dag_id``, ``task_id``, ``run_id``, ``map_index``,
            ``try_number``).

    Returns:
        ``(labels, annotations)``.
    """
    mi = -1 if ti.map_index is None else int(ti.map_index)
    exact = {
        "dag-id": str(ti.dag_id),
        "task-id": str(ti.task_id),
        "run-id": str(ti.run_id),
        "map-index": str(mi),
        "try-number": str(ti.try_number),
    }
    labels = {f"airflow-{k}": label_safe(v) for k, v in exact.items() if k != "map-index"}
    if mi >= 0:
        labels["airflow-map-index"] = str(mi)
    annotations = {f"tether.dev/airflow-{k}": v for k, v in exact.items()}
    return labels, annotations


def add_task_metadata(cfg: dict[str, CfgVal], opts: Any, ti: Any) -> None:
    """Adds the task's labels and annotations to ``cfg`` when the scheduler takes them.

    Args:
        cfg: The run options (changed in place; explicit entries win).
        opts: The scheduler's :class:`~tether.specs.runopts`.
        ti: The task instance.
    """
    labels, annotations = task_metadata(ti)
    for name, extra in (("labels", labels), ("annotations", annotations)):
        if name not in opts:
            continue
        given = cfg.get(name)
        merged = dict(extra)
        if isinstance(given, dict):
            merged.update({str(k): str(v) for k, v in given.items()})
        elif isinstance(given, str) and given:
            continue  # a "k=v" string the scheduler parses: leave it as the user wrote it
        cfg[name] = merged


def secret_name(job_key: str) -> str:
    """The name of the secret holding ``secret_env`` of the job with ``job_key``.

    Args:
        job_key: The job key (``airflow-<hash>``).

    Returns:
        A DNS-subdomain name, e.g. ``tether-airflow-3f2a...``.
    """
    return "tether-" + re.sub(r"[^a-z0-9-]+", "-", job_key.lower()).strip("-")[:56]
