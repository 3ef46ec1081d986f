"""Reading pods: which pod of a replica is the current one, and how its container ended.

Pure functions on pod dicts, no I/O; :mod:`tether.schedulers.kubernetes.status` turns what
they find into replica states.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tether.schedulers.kubernetes.fields import created_at, join_reason, meta_of


def termination(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    """The exit code and a message of the pod's terminated container (its last run).

    Args:
        pod: The pod.

    Returns:
        ``(exit code or None, text)``; the pod's own reason when no container
        terminated.
    """
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if term:
            code = term.get("exitCode")
            detail = join_reason(term.get("reason"), term.get("message"))
            text = f"exit code {code}" + (f" ({detail})" if detail else "")
            return (int(code) if code is not None else None), text
    detail = join_reason(status.get("reason"), status.get("message"))
    return None, detail or "the pod failed"


_PHASE_RANK = {"Failed": 0, "Succeeded": 1}


def _pod_order(pod: Mapping[str, Any]) -> tuple[datetime, int]:
    """Newest first by creation; creation times have 1 s resolution, so on a tie the pod
    still running (a retry replacing a failed one) beats a succeeded one beats a failed one."""
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    return created_at(pod), _PHASE_RANK.get(phase, 2)


def newest_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The current pod of a replica: the newest one not being deleted (None: no pod)."""
    live = [p for p in pods if not meta_of(p).get("deletionTimestamp")] or pods
    return max(live, key=_pod_order) if live else None


def owned_by(pod: Mapping[str, Any], uid: str) -> bool:
    """Whether the object with ``uid`` (a Job) owns the pod."""
    return any(ref.get("uid") == uid for ref in meta_of(pod).get("ownerReferences") or [])
