"""One kind's list + watch of tether's objects in one namespace, cached (a reflector).

A :class:`Reflector` lists the label-selected objects of one collection, then watches from the
list's ``resourceVersion``, keeping the objects by name and by app (their
``tether.dev/app-id`` label). A watch that ends is reopened from the last version seen
(bookmarks keep it fresh), ``410 Gone`` relists, and errors, 429 and 5xx answers reconnect
with backoff and jitter, never sooner than the apiserver's ``Retry-After`` asks. A kind the
cluster does not serve (an optional CRD) stays empty. The reflector knows nothing of apps'
states: :mod:`tether.schedulers.kubernetes.watch` reads its cache.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tether.schedulers.kubernetes.client import KubeApi, KubernetesApiError
from tether.schedulers.kubernetes.fetch import selector
from tether.schedulers.kubernetes.naming import LABEL_APP_ID
from tether.schedulers.watch.backoff import Backoff

log: logging.Logger = logging.getLogger(__name__)

WATCH_SECONDS = (240, 360)
"""Each watch asks the apiserver to end it after a random time in this range (seconds)."""


class _Gone(Exception):
    """The watch's resourceVersion is too old (``410 Gone``): relist."""


class Reflector:
    """One kind's list + watch in one namespace, keeping the matching objects by name.

    Args:
        api: The API.
        kind: The kind's name in the view (``jobs``, ``pods``...).
        path: The collection's path.
        optional: The cluster may not serve it (then it stays empty).
        changed: Called after each change of the cache with the app it concerns (None: any).
        stopped: Set when the reader stops.
    """

    def __init__(
        self,
        api: KubeApi,
        kind: str,
        path: str,
        optional: bool,
        changed: Callable[[str | None], None],
        stopped: threading.Event,
    ) -> None:
        self.kind = kind
        self.path = path
        self.optional = optional
        self.objects: dict[str, dict[str, Any]] = {}
        self.by_app: dict[str, dict[str, dict[str, Any]]] = {}
        self.synced = threading.Event()
        self.served = True
        self.error: KubernetesApiError | None = None  # why the stream is down, until reopened
        self.lists = 0
        self.watches = 0
        self._api = api
        self._changed = changed
        self._stopped = stopped
        self._lock = threading.Lock()
        self._rv: str | None = None
        self._listed = False  # the first list is served from the watch cache (_list_query)
        self._resp: Any = None
        self._thread = threading.Thread(target=self.run, name=f"tether-watch {path}", daemon=True)

    def start(self) -> None:
        """Starts the list + watch thread."""
        self._thread.start()

    def of_app(self, app: str) -> list[dict[str, Any]]:
        """The cached objects of one app (shared: do not change them).

        Args:
            app: The app's Kubernetes name (its ``tether.dev/app-id`` label).

        Returns:
            The objects.
        """
        with self._lock:
            return list(self.by_app.get(app, {}).values())

    def get(self, name: str) -> dict[str, Any] | None:
        """One cached object by name (shared: do not change it); None when not cached."""
        with self._lock:
            return self.objects.get(name)

    def _put(self, name: str, obj: dict[str, Any] | None) -> str | None:
        """Replaces (or with None removes) one object; returns the app it belongs to."""
        old = self.objects.pop(name, None)
        if old is not None:
            app = _app_of(old)
            if app is not None:
                self.by_app.get(app, {}).pop(name, None)
                if not self.by_app.get(app, True):
                    del self.by_app[app]
        if obj is None:
            return _app_of(old) if old is not None else None
        self.objects[name] = obj
        app = _app_of(obj)
        if app is not None:
            self.by_app.setdefault(app, {})[name] = obj
        return app

    def run(self) -> None:
        """Lists and watches until stopped (the thread's body)."""
        backoff = Backoff()
        while not self._stopped.is_set():
            try:
                if self._rv is None:
                    self._relist()
                self._watch()
                backoff.reset()
            except _Gone:
                log.info("watch of %s: resourceVersion too old (410); relisting", self.path)
                self._rv = None
            except KubernetesApiError as e:
                if e.status == 410:  # refused at once rather than as a watch event
                    log.info("watch of %s: 410 Gone; relisting", self.path)
                    self._rv = None
                    continue
                if self.optional and e.status in (403, 404, 405) and not self.synced.is_set():
                    self._not_served(e)
                    return
                self._down(e)
                self._stopped.wait(self._pause(backoff, e))
            except Exception as e:  # a dropped stream, a refused connection
                if self._stopped.is_set():
                    return
                self._down(e)
                self._stopped.wait(self._pause(backoff, e))

    def _down(self, e: Exception) -> None:
        status = e.status if isinstance(e, KubernetesApiError) else 0
        self.error = KubernetesApiError(status, f"the {self.kind} watch of {self.path}: {e}")

    def _pause(self, backoff: Backoff, e: Exception) -> float:
        pause = backoff.next()
        asked = getattr(e, "retry_after", None)  # a 429 or 5xx's Retry-After
        if asked is not None:
            pause = max(pause, asked)
        log.warning("watch of %s failed (%s); reconnecting in %.1f s", self.path, e, pause)
        return pause

    def _not_served(self, e: KubernetesApiError) -> None:
        log.debug("%s is not served here (%s); not watched", self.path, e.status)
        self.served = False
        self.synced.set()
        self._changed(None)

    def _relist(self) -> None:
        items: dict[str, dict[str, Any]] = {}
        token: str | None = None
        rv: str | None = None
        while True:
            query = self._list_query(token)
            self.lists += 1
            body = self._api.request("GET", self.path, query=query) or {}
            kind = str(body.get("kind") or "")
            for item in body.get("items") or []:
                item.setdefault("apiVersion", body.get("apiVersion"))
                if kind.endswith("List"):
                    item.setdefault("kind", kind[: -len("List")])
                items[str(item["metadata"]["name"])] = _slim(item)
            meta = body.get("metadata") or {}
            rv = meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self.objects, self.by_app = {}, {}
            for name, item in items.items():
                self._put(name, item)
        self._rv = rv
        self._listed = True
        self.error = None
        self.synced.set()
        self._changed(None)

    def _list_query(self, token: str | None) -> dict[str, Any]:
        """The query of one list request.

        The first list is served from the apiserver's watch cache in one response, whatever
        the number of jobs (``resourceVersion=0``, as a client-go reflector starts): nothing
        was seen before it, so it cannot take a job back in time. A relist (after ``410
        Gone``) reads etcd, consistent and paged, so no state heard earlier is undone.
        """
        if not self._listed:
            return {"labelSelector": selector(), "resourceVersion": "0"}
        return {"labelSelector": selector(), "limit": 500, "continue": token}

    def _watch(self) -> None:
        seconds = random.randint(*WATCH_SECONDS)  # noqa: S311 (spreads reconnects)
        query = {
            "watch": "true",
            "labelSelector": selector(),
            "resourceVersion": self._rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": seconds,
        }
        self.watches += 1
        resp = self._api._call(
            "GET", self.path, query=query, timeout=(10.0, seconds + 30.0), stream=True
        )
        with self._lock:
            self._resp = resp
        self.error = None
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf and not self._stopped.is_set():
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._apply(json.loads(line))
        finally:
            with self._lock:
                self._resp = None
            resp.close()
            resp.release_conn()

    def stop(self) -> None:
        """Interrupts the open watch (its thread then ends)."""
        with self._lock:
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # already closed
                log.debug("interrupting the watch of %s failed", self.path, exc_info=True)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise _Gone()
            raise KubernetesApiError(code, f"watch of {self.path}: {obj.get('message')}")
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            with self._lock:
                gone = kind == "DELETED"
                app = self._put(str(meta.get("name")), None if gone else _slim(dict(obj)))
            if app is not None:
                self._changed(app)
        if rv:
            self._rv = str(rv)


def _app_of(obj: Mapping[str, Any]) -> str | None:
    """The app an object belongs to (its ``tether.dev/app-id`` label)."""
    app = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_APP_ID)
    return str(app) if app else None


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what no analysis reads (``managedFields``: often half its size)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj
