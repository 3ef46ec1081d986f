"""Reading the apiserver's objects, which the status analysis gets as plain dicts.

Null-safe accessors of metadata, labels and annotations, integers from annotation strings,
RFC 3339 times, an object's creation and submission time, its true conditions, and the
``reason: message`` texts shown to users. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from tether.schedulers.kubernetes.naming import ANN_SUBMITTED


def meta_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The object's ``metadata`` (empty when missing)."""
    return dict((obj or {}).get("metadata") or {})


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """The object's labels (empty when missing)."""
    return dict(meta_of(obj).get("labels") or {})


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """The object's annotations (empty when missing)."""
    return dict(meta_of(obj).get("annotations") or {})


def to_int(text: Any, default: int = 0) -> int:
    """``text`` as an integer, ``default`` when it is not one."""
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


def parse_time(text: str | None) -> datetime | None:
    """Parses an RFC 3339 timestamp (any number of fractional digits) as an aware datetime.

    Args:
        text: E.g. ``2024-05-01T10:00:00Z`` or ``2024-05-01T10:00:00.123456789Z``.

    Returns:
        The time, or None for an empty or malformed text.
    """
    if not text:
        return None
    text = text.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    m = re.match(r"^(.*?T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    try:
        ts = datetime.fromisoformat(m.group(1) + frac + m.group(3))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def created_at(obj: Mapping[str, Any]) -> datetime:
    """The object's ``creationTimestamp`` (the earliest time when missing)."""
    return parse_time(meta_of(obj).get("creationTimestamp")) or datetime.min.replace(
        tzinfo=timezone.utc
    )


def submitted_at(obj: Mapping[str, Any]) -> float:
    """When tether submitted the object (its annotation), else its creationTimestamp."""
    try:
        return float(annotations_of(obj)[ANN_SUBMITTED])
    except (KeyError, ValueError):
        return created_at(obj).timestamp()


def true_conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The object's conditions whose status is ``True``, by type."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conds if c.get("status") == "True"}


def join_reason(reason: str | None, message: str | None) -> str:
    """``reason: message``, or whichever of the two is not empty."""
    reason, message = (reason or "").strip(), (message or "").strip()
    if reason and message:
        return f"{reason}: {message}"
    return reason or message
