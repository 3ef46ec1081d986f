"""JSON access to a kube-apiserver for the kubernetes scheduler (the client is imported lazily).

The scheduler works on plain manifest dicts (the same camelCase shapes that
:mod:`tether.schedulers.kubernetes.render` produces), for built-in kinds and custom resources
alike, so it talks REST through ``kubernetes.client.ApiClient.call_api`` with
``_preload_content=False`` instead of the generated typed models. Importing this module does
not import ``kubernetes``; :func:`load_api_client` does.
"""

from __future__ import annotations

import copy
import email.utils
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from tether.errors import BackendError, BackendErrorKind
from tether.schedulers import interrupt
from tether.schedulers.errors import CapacityError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0
MERGE_PATCH = "application/merge-patch+json"


class KubernetesApiError(BackendError):
    """The apiserver refused a request; ``status`` is the HTTP status (0 when unreachable).

    ``retry_after`` is the seconds the apiserver asked the client to wait (its
    ``Retry-After`` header on a 429 or 5xx), or None.
    """

    backend = "kubernetes"
    kind: BackendErrorKind = "api"

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


RETRY_AFTER_CAP_S = 300.0
"""The longest ``Retry-After`` honoured (a larger one is taken as this)."""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds or an HTTP date.

    Args:
        value: The header's value (None when absent).

    Returns:
        The seconds to wait (0 to :data:`RETRY_AFTER_CAP_S`), or None when absent or unreadable.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


class KubernetesQuotaError(KubernetesApiError, CapacityError):
    """The apiserver refused an object because a namespace ResourceQuota is used up (HTTP 403
    ``exceeded quota: NAME, requested: ..., used: ..., limited: ...``): a capacity refusal
    (kind ``quota``), not a permission problem."""

    kind: BackendErrorKind = "quota"

    def __init__(self, status: int, message: str, quota: str, detail: str) -> None:
        super().__init__(status, message)
        self.quota, self.detail = quota, detail


_QUOTA = re.compile(r"exceeded quota: ([^,\s]+)(.*)")


def quota_refusal(err: KubernetesApiError) -> tuple[str, str] | None:
    """The quota's name and the apiserver's words when ``err`` is a ResourceQuota refusal.

    Args:
        err: An error of a create.

    Returns:
        ``(quota name, "exceeded quota: ...")``, or None for any other error (a 403 without
        ``exceeded quota`` is a permission problem).
    """
    if err.status != 403:
        return None
    m = _QUOTA.search(str(err))
    return (m.group(1), m.group(0)) if m else None


class KubernetesUnreachableError(KubernetesApiError):
    """The apiserver could not be reached at all (nothing answers, DNS, TLS...)."""

    kind: BackendErrorKind = "connection"

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


class KubernetesConfigError(KubernetesApiError, ValueError):
    """No usable kubeconfig: a missing file, an unknown context, an invalid file."""

    kind: BackendErrorKind = "connection"

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


_HINT = ("set $KUBECONFIG to your cluster's kubeconfig or create ~/.kube/config "
         "(`tether run --dryrun` needs no cluster)")


def kubeconfig_paths(kubeconfig: str | None = None) -> tuple[list[str], str]:
    """The kubeconfig files the client reads, as ``kubectl`` does, and where they came from.

    Read when called, not when ``kubernetes`` was imported: a ``$KUBECONFIG`` set later in
    the process counts.

    Args:
        kubeconfig: An explicit file (wins).

    Returns:
        The paths (``$KUBECONFIG`` may list several) and a word on their origin.
    """
    if kubeconfig:
        return [os.path.expanduser(kubeconfig)], "the kubeconfig given to the scheduler"
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [os.path.expanduser(p) for p in env.split(os.pathsep) if p], "$KUBECONFIG"
    return [os.path.expanduser("~/.kube/config")], "the default location"


def _quiet_urllib3_retries() -> None:
    """urllib3 logs each retry of a refused connection as a warning; the error that follows
    says it once, with the server and the kubeconfig."""
    pool_log = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _NoRetryWarnings) for f in pool_log.filters):
        pool_log.addFilter(_NoRetryWarnings())


class _NoRetryWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying (")


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """Creates a ``kubernetes.client.ApiClient``.

    Order: an explicit ``kubeconfig`` file; the in-cluster service account when running in
    a pod (``$KUBERNETES_SERVICE_HOST``); else ``$KUBECONFIG`` (as it is now) or
    ``~/.kube/config``.

    Args:
        kubeconfig: Path of a kubeconfig file.
        context: Context to use (default: the file's current context).

    Returns:
        The client; ``client.tether_source`` says which kubeconfig and context it uses.

    Raises:
        KubernetesApiError: When no configuration can be loaded: a missing file, a context
            the file does not have (the message lists those it has), an invalid file.
    """
    try:
        from kubernetes import client, config
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise KubernetesApiError(
            0,
            "the kubernetes scheduler needs the `kubernetes` package: "
            "pip install 'tether[kubernetes]'",
        ) from e
    _quiet_urllib3_retries()
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        api = client.ApiClient(cfg)
        api.tether_source = "the pod's service account"
        return api
    paths, origin = kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if os.path.isfile(p)]
    if not existing:
        raise KubernetesConfigError(
            f"no Kubernetes configuration: {', '.join(paths)} ({origin}) does not exist; "
            + _HINT)
    files = os.pathsep.join(existing)
    try:
        contexts, current = config.list_kube_config_contexts(config_file=files)
    except Exception as e:
        raise KubernetesConfigError(
            f"cannot read the kubeconfig {files} ({origin}): {e}; " + _HINT) from e
    names = [str(c.get("name")) for c in contexts or []]
    chosen = context or (current or {}).get("name")
    if chosen not in names:
        what = (f"has no context {context!r}" if context else
                f"has no current-context {chosen!r}" if chosen else "sets no current-context")
        raise KubernetesConfigError(
            f"the kubeconfig {files} ({origin}) {what}; its contexts: "
            f"{', '.join(names) or 'none'} (pick one with the run option context: "
            "`-cfg context=NAME`, or `context` in [kubernetes] of .tetherconfig)")
    try:
        api = config.new_client_from_config(config_file=files, context=context)
    except Exception as e:
        raise KubernetesConfigError(
            f"cannot load the Kubernetes configuration from {files} ({origin}), context "
            f"{chosen!r}: {e}") from e
    api.tether_source = f"kubeconfig {files}, context {chosen}"
    return api


def stream_client(base: Any) -> Any:
    """A client of its own for long-lived reads (the watch hub), configured as ``base``.

    It has its own connection pool (the watches do not take the caller's connections), and
    urllib3 does not retry a 429 or 503 itself: the answer, with its ``Retry-After``,
    reaches the caller (:attr:`KubernetesApiError.retry_after`), which waits as asked.
    Refused connections are still retried (three times).

    Args:
        base: A ``kubernetes.client.ApiClient``.

    Returns:
        The new client (close it when done).
    """
    from kubernetes import client
    from urllib3.util.retry import Retry

    cfg = copy.deepcopy(base.configuration)
    cfg.retries = Retry(3, respect_retry_after_header=False)
    out = client.ApiClient(cfg)
    out.default_headers.update(getattr(base, "default_headers", {}) or {})
    out.tether_source = getattr(base, "tether_source", "")
    return out


def _quote(part: str) -> str:
    return quote(part, safe="")


def core_path(namespace: str, plural: str, name: str | None = None) -> str:
    """``/api/v1/namespaces/{ns}/{plural}[/{name}]`` (pods, services...)."""
    path = f"/api/v1/namespaces/{_quote(namespace)}/{plural}"
    return f"{path}/{_quote(name)}" if name else path


def group_path(
    group: str, version: str, plural: str, namespace: str | None, name: str | None = None
) -> str:
    """``/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]``."""
    path = f"/apis/{group}/{version}"
    if namespace is not None:
        path += f"/namespaces/{_quote(namespace)}"
    path += f"/{plural}"
    return f"{path}/{_quote(name)}" if name else path


def path_for(manifest: Mapping[str, Any], namespace: str, with_name: bool = False) -> str:
    """The collection (or object) path of a manifest.

    Args:
        manifest: An object with ``apiVersion`` and ``kind``.
        namespace: Its namespace.
        with_name: Include ``metadata.name``.

    Returns:
        The path.
    """
    api_version = str(manifest["apiVersion"])
    plural = str(manifest["kind"]).lower() + "s"
    name = str(manifest["metadata"]["name"]) if with_name else None
    if "/" not in api_version:
        return core_path(namespace, plural, name)
    group, _, version = api_version.partition("/")
    return group_path(group, version, plural, namespace, name)


class KubeApi:
    """Plain-JSON REST calls through a configured ``ApiClient``.

    Args:
        api_client: A ``kubernetes.client.ApiClient``.
    """

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self.reached = False
        """Whether the apiserver answered once (an unreachable one is then a blip, not a
        wrong configuration)."""

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float | None] = REQUEST_TIMEOUT_S,
        stream: bool = False,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json, */*", "Content-Type": content_type}
        request_timeout: Any = timeout
        if isinstance(timeout, float):
            request_timeout = (min(timeout, 10.0), timeout)
        try:
            resp = self.api_client.call_api(
                path,
                method,
                query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=request_timeout,
            )
        except ApiException as e:
            self.reached = True
            after = parse_retry_after((e.headers or {}).get("Retry-After"))
            status = int(e.status or 0)
            raise KubernetesApiError(status, _error_message(method, path, e), after) from e
        except Exception as e:  # urllib3 connection errors
            if stream:
                raise
            raise KubernetesUnreachableError(self.unreachable(method, path, e)) from e
        self.reached = True
        return resp

    def unreachable(self, method: str, path: str, e: BaseException) -> str:
        """The message for an apiserver that cannot be reached: which server, which config."""
        host = getattr(getattr(self.api_client, "configuration", None), "host", "?")
        source = getattr(self.api_client, "tether_source", "")
        reason = getattr(e, "reason", None) or e
        found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(reason))
        why = found.group(1).strip() if found else str(reason)
        return (f"cannot reach the Kubernetes apiserver at {host}"
                + (f" ({source})" if source else "")
                + f": {why} ({method} {path}). Is the cluster up, and is this the kubeconfig "
                  "and context you meant?")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; returns the decoded JSON body (None when empty).

        Raises:
            KubernetesApiError: For a non-2xx answer or an unreachable apiserver.
        """
        resp = self._call(method, path, query=query, body=body, content_type=content_type)
        data = resp.data
        return json.loads(data) if data else None

    def get(self, path: str) -> dict[str, Any] | None:
        """GETs an object; None when it (or its API group) does not exist."""
        try:
            out: dict[str, Any] = self.request("GET", path)
            return out
        except KubernetesApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Lists the objects of a collection; empty when the API group does not exist.

        Args:
            path: The collection's path.
            label_selector: A label selector.

        Returns:
            The items.
        """
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = {"labelSelector": label_selector, "limit": 500, "continue": token}
            try:
                body = self.request("GET", path, query=query) or {}
            except KubernetesApiError as e:
                if e.status == 404:
                    return []
                raise
            kind = str(body.get("kind") or "")
            for item in body.get("items") or []:
                # items of a list carry no kind/apiVersion: restore them from the list's
                item.setdefault("apiVersion", body.get("apiVersion"))
                if kind.endswith("List"):
                    item.setdefault("kind", kind[: -len("List")])
                items.append(item)
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POSTs an object and returns what the apiserver stored."""
        out: dict[str, Any] = self.request("POST", path, body=dict(body))
        return out

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Applies a JSON merge patch; None when the object is gone."""
        try:
            out: dict[str, Any] = self.request(
                "PATCH", path, body=dict(body), content_type=MERGE_PATCH
            )
            return out
        except KubernetesApiError as e:
            if e.status == 404:
                return None
            raise

    def delete(self, path: str, propagation: str = "Background") -> bool:
        """Deletes an object (dependents removed in the background); False if it was gone."""
        try:
            self.request(
                "DELETE",
                path,
                body={"kind": "DeleteOptions", "apiVersion": "v1",
                      "propagationPolicy": propagation},
            )  # fmt: skip
            return True
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise

    def stream_lines(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None,
    ) -> Iterator[str]:
        """Streams a text response (pod logs, watches) line by line, ``\\n`` stripped.

        Args:
            path: The path.
            query: Query parameters.
            read_timeout: Seconds without data before the stream is abandoned (None: wait).

        Yields:
            Lines (the last one even without a trailing newline).

        Raises:
            KubernetesApiError: When the request is refused.
            Stopped: When the reading thread's log consumer stopped (see
                :mod:`tether.schedulers.interrupt`): the connection is shut at once.
        """
        resp = self._call(
            "GET", path, query=query, content_type="application/json",
            timeout=(10.0, read_timeout), stream=True,
        )  # fmt: skip
        token = interrupt.current()
        unregister = token.on_set(lambda: _shutdown(resp)) if token is not None else None
        buf = b""
        try:
            for chunk in resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line.decode("utf-8", errors="replace")
            interrupt.check()  # a stream shut by a stop request is not a finished one
            if buf:
                yield buf.decode("utf-8", errors="replace")
        except Exception:
            interrupt.check()  # nor a dropped one, to read again
            raise
        finally:
            if unregister is not None:
                unregister()
            # a stream left early (until= reached, a watch event seen) has unread data:
            # close the connection rather than hand it back to the pool half-read
            resp.close()
            resp.release_conn()


def _shutdown(resp: Any) -> None:
    """Ends a blocked read of a streamed response from another thread."""
    try:
        resp.shutdown()
    except Exception:  # closed already, or a urllib3 without shutdown: the read times out
        log.debug("shutting a log stream failed", exc_info=True)


def _error_message(method: str, path: str, e: Any) -> str:
    body = e.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    detail = ""
    try:
        doc = json.loads(body) if body else None
        if isinstance(doc, dict):
            detail = str(doc.get("message") or "")
    except ValueError:
        detail = str(body or "")[:500]
    return f"{method} {path}: {e.status} {e.reason}" + (f": {detail}" if detail else "")
