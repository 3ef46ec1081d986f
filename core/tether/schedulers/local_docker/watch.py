"""Following every followed ``local_docker`` app of an engine with two listings per read.

Each read lists tether's containers (``GET /containers/json``, label-filtered: each one's
app, state and status word) and tether's event records (``GET /volumes``, the cancel and
start-failure marks) once for every followed app of the engine, and describes an app (its
network and containers inspected) only when what the listings show of it changed, or
:data:`REDESCRIBE_S` passed (a restart a read fell between). N quiet apps cost two requests
per interval, not N describes. An app the listings do not show is confirmed by ``describe``
before anyone hears it is gone; a failed request is no news.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.local_docker.render import LABEL_APP_ID, LABEL_MANAGED_BY, MANAGED_BY
from tether.schedulers.local_docker.scheduler import LABEL_EVENT, LocalDockerScheduler
from tether.schedulers.watch.events import FollowTarget, view_target

REDESCRIBE_S = 60.0
"""Seconds after which a followed app is described again, whatever the listings show."""

_STATUS_WORD = re.compile(r"^\s*(\w+)(?: \((-?\d+)\))?")


def _status_word(status: object) -> str:
    """``Exited (1) 3 seconds ago`` -> ``Exited (1)``; ``Up 5 seconds`` -> ``Up``."""
    m = _STATUS_WORD.match(str(status or ""))
    return m.group(0).strip() if m else ""


class DockerReader:
    """Reads the followed apps of one engine (see the module docs).

    Args:
        scheduler: The scheduler (its engine client).
    """

    def __init__(self, scheduler: LocalDockerScheduler) -> None:
        self._scheduler = scheduler
        self._marks: dict[str, tuple[str, ...]] = {}
        self._views: dict[str, DescribeAppResponse] = {}
        self._described: dict[str, float] = {}
        self.lists = 0
        self.describes = 0

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start (the driver reads every interval).

        Args:
            wake: Unused.
        """

    def _listed(self, app_ids: Collection[str]) -> dict[str, list[str]]:
        """What the two listings show of each followed app."""
        api = self._scheduler.api
        label = {"label": [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]}
        self.lists += 2
        shown: dict[str, list[str]] = {}
        for c in api.containers(all=True, filters=label):
            app = str((c.get("Labels") or {}).get(LABEL_APP_ID))
            if app in app_ids:
                word = _status_word(c.get("Status"))
                shown.setdefault(app, []).append(f"{c.get('Id')} {c.get('State')} {word}")
        for v in (api.volumes(filters=label) or {}).get("Volumes") or []:
            labels = v.get("Labels") or {}
            app = str(labels.get(LABEL_APP_ID))
            if app in app_ids and LABEL_EVENT in labels:
                shown.setdefault(app, []).append(f"event {labels[LABEL_EVENT]}")
        return shown

    def read(self, app_ids: Collection[str]) -> Mapping[str, DescribeAppResponse]:
        """Two listings, and a describe of each followed app whose listing changed.

        Args:
            app_ids: The followed apps.

        Returns:
            The followed apps the listings show.
        """
        for cache in (self._marks, self._views, self._described):
            for gone in set(cache) - set(app_ids):
                del cache[gone]
        if not app_ids:
            return {}
        now = time.monotonic()
        out: dict[str, DescribeAppResponse] = {}
        for app_id, parts in self._listed(app_ids).items():
            mark = tuple(sorted(parts))
            stale = now - self._described.get(app_id, float("-inf")) >= REDESCRIBE_S
            if mark != self._marks.get(app_id) or stale or app_id not in self._views:
                self.describes += 1
                resp = self._scheduler.describe(app_id)
                if resp is None:  # gone between the listing and the describe
                    continue
                self._marks[app_id], self._views[app_id] = mark, resp
                self._described[app_id] = now
            out[app_id] = self._views[app_id]
        return out

    def confirm(self, app_id: str) -> DescribeAppResponse | None:
        """The scheduler's ``describe`` of one app.

        Args:
            app_id: The app.

        Returns:
            Its description, or None when the engine has nothing of it.
        """
        return self._scheduler.describe(app_id)

    def stop(self) -> None:
        """Nothing to stop."""


def follow_target(scheduler: Scheduler[Any], app_id: str) -> FollowTarget:
    """The view of the scheduler's engine.

    Args:
        scheduler: A :class:`LocalDockerScheduler`.
        app_id: The app (every app of the engine shares the view).

    Returns:
        The target.

    Raises:
        TypeError: For another scheduler.
    """
    return view_target(scheduler, LocalDockerScheduler, lambda s: s.engine_key, DockerReader)
