"""A small test kubelet for :class:`tests.e2e.infra.kube.KubeCluster`.

It registers a Node (address 127.0.0.1, kubelet port = a small HTTPS server of ours), binds
the pending pods it watches to that node, and drives their status the way a real kubelet
would, according to a per-pod :class:`Behaviour` chosen by a callable. The same HTTPS
server answers the apiserver's ``/containerLogs/{namespace}/{pod}/{container}`` proxy
requests (``follow``, ``sinceSeconds``, ``sinceTime``, ``timestamps``, ``tailLines``,
``limitBytes``, ``previous``) from lines the test supplies, so that
``CoreV1Api.read_namespaced_pod_log`` works end to end.

No container runtime: by default no program runs, the pod's phases follow the behaviour. With
an ``executor`` (:class:`~.kubelet_exec.PodExecutor`) a pod whose behaviour is
:meth:`Behaviour.run_process` runs its container command as a local process, whose output is
its log and whose exit code ends the pod.

Example:
    >>> def behaviour(pod):  # doctest: +SKIP
    ...     if pod.metadata.labels.get("replica") == "1":
    ...         return Behaviour.fail(exit_code=3)
    ...     return Behaviour.succeed(run_seconds=0.5)
    >>> with KubeCluster() as c, FakeKubelet(c.api_client(), behaviour=behaviour):  # doctest: +SKIP
    ...     ...
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import inspect
import itertools
import logging
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kubernetes import client, watch
from kubernetes.client import ApiClient, V1Pod
from kubernetes.client.rest import ApiException

from tests.e2e.infra.kubelet_exec import PodExecutor

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: A log item: a plain line, or ``(timestamp, line)``; naive datetimes are taken as UTC.
LogItem = str | tuple[datetime, str]
#: ``(pod) -> lines`` or ``(pod, container_name) -> lines``.
LogSource = Callable[..., Sequence[LogItem]]
BehaviourPolicy = Callable[[V1Pod], "Behaviour"]

# Outcomes of a Behaviour.
SUCCEED = "succeed"
FAIL = "fail"
WAITING = "waiting"
UNSCHEDULABLE = "unschedulable"
CRASH_LOOP = "crash_loop"
RUN_FOREVER = "run_forever"
PROCESS = "process"
_OUTCOMES = frozenset({SUCCEED, FAIL, WAITING, UNSCHEDULABLE, CRASH_LOOP, RUN_FOREVER, PROCESS})


@dataclass(frozen=True)
class Behaviour:
    """What the test kubelet does with one pod. Build with the class methods.

    Attributes:
        outcome: One of ``succeed``, ``fail``, ``waiting``, ``unschedulable``,
            ``crash_loop``, ``run_forever``.
        exit_code: Exit code of every container when the pod terminates (or crashes).
        run_seconds: Seconds spent Running before terminating (crash_loop: between crashes).
        start_delay: Seconds between binding and the first status (ContainerCreating time).
        reason: Waiting / terminated reason, or the Unschedulable condition's reason.
        message: Message for the same.
    """

    outcome: str = SUCCEED
    exit_code: int = 0
    run_seconds: float = 0.5
    start_delay: float = 0.05
    reason: str = ""
    message: str = ""

    def __post_init__(self) -> None:
        """Validates the outcome."""
        if self.outcome not in _OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; expected one of {_OUTCOMES}")

    @classmethod
    def succeed(cls, run_seconds: float = 0.5) -> Behaviour:
        """Running, then Succeeded with every container terminated (exit code 0, Completed)."""
        return cls(SUCCEED, exit_code=0, run_seconds=run_seconds, reason="Completed")

    @classmethod
    def fail(
        cls, exit_code: int = 1, run_seconds: float = 0.5, reason: str = "Error", message: str = ""
    ) -> Behaviour:
        """Running, then Failed with every container terminated with ``exit_code``."""
        if exit_code == 0:
            raise ValueError("a failing pod needs a non-zero exit code")
        return cls(
            FAIL, exit_code=exit_code, run_seconds=run_seconds, reason=reason, message=message
        )

    @classmethod
    def waiting(cls, reason: str = "ErrImagePull", message: str = "") -> Behaviour:
        """Bound but stays Pending, containers Waiting with ``reason`` (never started)."""
        return cls(WAITING, reason=reason, message=message)

    @classmethod
    def image_pull_error(cls, backoff: bool = False, message: str = "") -> Behaviour:
        """Waiting with reason ``ErrImagePull`` (or ``ImagePullBackOff`` if ``backoff``)."""
        reason = "ImagePullBackOff" if backoff else "ErrImagePull"
        return cls.waiting(reason, message)

    @classmethod
    def unschedulable(
        cls, message: str = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    ) -> Behaviour:
        """Never bound: condition PodScheduled=False, reason Unschedulable."""
        return cls(UNSCHEDULABLE, reason="Unschedulable", message=message)

    @classmethod
    def crash_loop(cls, exit_code: int = 1, restart_seconds: float = 1.0) -> Behaviour:
        """Running phase, containers Waiting with reason CrashLoopBackOff, restart count growing.

        The last state is terminated with ``exit_code``; the pod never terminates (whatever
        its restartPolicy) until deleted.
        """
        return cls(
            CRASH_LOOP, exit_code=exit_code, run_seconds=restart_seconds, reason="CrashLoopBackOff"
        )

    @classmethod
    def run_forever(cls) -> Behaviour:
        """Running until deleted."""
        return cls(RUN_FOREVER)

    @classmethod
    def run_process(cls) -> Behaviour:
        """Runs the container command as a local process (needs ``FakeKubelet(executor=)``).

        The pod is Running while the process runs, then Succeeded or Failed with its exit
        code; its output is the container log (see :mod:`.kubelet_exec`).
        """
        return cls(PROCESS, reason="")


@dataclass
class PodRecord:
    """What the test kubelet knows about one pod (a copy is handed out by its accessors).

    Attributes:
        namespace: Pod namespace.
        name: Pod name.
        uid: Pod UID.
        behaviour: Chosen behaviour.
        pod: Latest pod object seen.
        state: ``new``, ``bound``, ``unschedulable``, ``waiting``, ``running``,
            ``crash_loop``, ``succeeded``, ``failed`` or ``deleted``.
        history: Every state it went through, in order.
        started_at: When its containers "started" (Running), if they did.
        finished_at: When they terminated, if they did.
        restart_count: Restarts (crash_loop).
    """

    namespace: str
    name: str
    uid: str
    behaviour: Behaviour
    pod: V1Pod
    state: str = "new"
    history: list[str] = field(default_factory=lambda: ["new"])
    started_at: datetime | None = None
    finished_at: datetime | None = None
    restart_count: int = 0
    deleting: bool = False

    @property
    def terminal(self) -> bool:
        """Whether the containers will not produce more output."""
        return self.state in {"succeeded", "failed", "deleted"}

    def set_state(self, state: str) -> None:
        """Records a state transition."""
        self.state = state
        self.history.append(state)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _k8s_time(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _log_time(ts: datetime) -> str:
    """Formats a timestamp like the kubelet does (RFC3339 with 9 fractional digits)."""
    ts = ts.astimezone(timezone.utc)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond * 1000:09d}Z"


def _parse_time(text: str) -> datetime:
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Python < 3.11 takes at most 6 fractional digits.
    if "." in text:
        head, _, rest = text.partition(".")
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        text = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    ts = datetime.fromisoformat(text)
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _make_cert(directory: Path) -> tuple[Path, Path]:
    """Creates a self-signed serving certificate for 127.0.0.1 with openssl."""
    cert, key = directory / "kubelet.crt", directory / "kubelet.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", "/CN=tether-test-kubelet",
            "-addext", f"subjectAltName=IP:{LOOPBACK},DNS:localhost",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


class _TLSServer(ThreadingHTTPServer):
    """Threading HTTPS server; the TLS handshake runs in the per-connection thread."""

    daemon_threads = True
    kubelet: FakeKubelet
    ssl_context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Wraps the connection in TLS, then serves it."""
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logs at debug level instead of printing tracebacks."""
        log.debug("kubelet server error from %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _TLSServer
    protocol_version = "HTTP/1.0"  # close-delimited bodies: simple streaming for follow=true

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet http: " + format, *args)

    def _reply(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        """Serves /healthz and /containerLogs/{namespace}/{pod}/{container}."""
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._reply(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(404, f"404 page not found: {url.path}")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.server.kubelet.requests.append(self.path)
        try:
            status, error, chunks = self.server.kubelet.serve_logs(
                parts[1], parts[2], parts[3], query
            )
        except Exception as err:
            self._reply(500, f"{type(err).__name__}: {err}")
            return
        if status != 200:
            self._reply(status, error)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()


class FakeKubelet:
    """A test kubelet: a Node, a pod-binding/status-driving thread, and a log server.

    Use as a context manager, or call :meth:`start` / :meth:`stop`.

    Attributes:
        node_name: Name of the registered Node.
        port: Port of the HTTPS kubelet server on 127.0.0.1 (the Node's kubelet port).
        requests: Paths of the log requests the server received (for assertions).
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        node_name: str = "tether-node-0",
        namespace: str | None = None,
        label_selector: str | None = None,
        behaviour: BehaviourPolicy | Behaviour | None = None,
        logs: LogSource | None = None,
        capacity: dict[str, str] | None = None,
        node_labels: dict[str, str] | None = None,
        delete_node_on_stop: bool = True,
        watch_timeout: int = 5,
        executor: PodExecutor | None = None,
    ) -> None:
        """Prepares (does not start) the kubelet.

        Args:
            api: Configured ``ApiClient`` (e.g. ``KubeCluster.api_client()``).
            node_name: Node to register and bind pods to.
            namespace: Only handle pods in this namespace (default: all namespaces).
            label_selector: Only handle pods matching this label selector.
            behaviour: ``(pod) -> Behaviour``, or one Behaviour for all pods; default
                ``Behaviour.succeed()``.
            logs: ``(pod) -> lines`` or ``(pod, container) -> lines``; each line a ``str``
                or ``(datetime, str)``. Lines without a timestamp get the container start
                time (plus one microsecond per line). Re-read while following.
            capacity: Node capacity/allocatable (default cpu 8, memory 32Gi, pods 110,
                nvidia.com/gpu 8).
            node_labels: Extra Node labels.
            delete_node_on_stop: Delete the Node on stop.
            watch_timeout: Server-side timeout of each pod watch (the thread relists after
                each); bounds how long :meth:`stop` waits.
            executor: Runs the pods whose behaviour is :meth:`Behaviour.run_process` as
                local processes (their output is their log).
        """
        self.api = api
        self.v1 = client.CoreV1Api(api)
        self.node_name = node_name
        self.namespace = namespace
        self.label_selector = label_selector
        if behaviour is None:
            behaviour = Behaviour.succeed()
        if isinstance(behaviour, Behaviour):
            fixed = behaviour
            self._policy: BehaviourPolicy = lambda _pod: fixed
        else:
            self._policy = behaviour
        self._logs = logs
        self._logs_take_container = logs is not None and _positional_arity(logs) >= 2
        self.capacity = capacity or {
            "cpu": "8",
            "memory": "32Gi",
            "pods": "110",
            "nvidia.com/gpu": "8",
        }
        self.node_labels = dict(node_labels or {})
        self.delete_node_on_stop = delete_node_on_stop
        self.watch_timeout = watch_timeout
        self.executor = executor
        self.port = 0
        self.requests: list[str] = []
        self.errors: list[str] = []

        self._lock = threading.Condition()
        self._records: dict[tuple[str, str], PodRecord] = {}
        self._queue: list[tuple[float, int, tuple[str, str], str, str]] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: _TLSServer | None = None
        self._tmp: Path | None = None
        self._watch_resp: Any = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeKubelet:
        """Starts the kubelet."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stops the kubelet."""
        self.stop()

    def start(self) -> FakeKubelet:
        """Starts the HTTPS server, registers the Node, and starts the pod threads.

        Returns:
            self.
        """
        self._stop.clear()
        self._tmp = Path(tempfile.mkdtemp(prefix="tether-kubelet-"))
        try:
            cert, key = _make_cert(self._tmp)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert), str(key))
            server = _TLSServer((LOOPBACK, 0), _Handler)
            server.kubelet = self
            server.ssl_context = ctx
            self._server = server
            self.port = int(server.server_address[1])
            self._spawn("kubelet-http", functools.partial(server.serve_forever, 0.1))
            self._register_node()
            self._spawn("kubelet-watch", self._watch_loop)
            self._spawn("kubelet-driver", self._driver_loop)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops the threads and the server; deletes the Node unless told not to."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self.executor is not None:
            self.executor.kill_all()
        _interrupt(self._watch_resp)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=self.watch_timeout + 5)
        self._threads.clear()
        if self.delete_node_on_stop:
            with contextlib.suppress(Exception):
                self.v1.delete_node(self.node_name)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"{name}-{self.node_name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # ------------------------------------------------------------------ inspection
    def records(self) -> dict[tuple[str, str], PodRecord]:
        """Returns copies of the pod records, keyed by ``(namespace, name)``."""
        with self._lock:
            return {k: replace(r, history=list(r.history)) for k, r in self._records.items()}

    def record(self, namespace: str, name: str) -> PodRecord | None:
        """Returns a copy of one pod's record, or None."""
        with self._lock:
            rec = self._records.get((namespace, name))
            return None if rec is None else replace(rec, history=list(rec.history))

    def wait_for_state(
        self, namespace: str, name: str, states: str | Sequence[str], timeout: float = 30.0
    ) -> PodRecord:
        """Waits until the kubelet has put a pod into one of ``states``.

        Args:
            namespace: Pod namespace.
            name: Pod name.
            states: A state or states (see :class:`PodRecord`).
            timeout: Seconds.

        Returns:
            A copy of the record.

        Raises:
            TimeoutError: If it does not happen in time.
        """
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                rec = self._records.get((namespace, name))
                if rec is not None and rec.state in wanted:
                    return replace(rec, history=list(rec.history))
                left = deadline - time.monotonic()
                if left <= 0:
                    got = None if rec is None else rec.history
                    raise TimeoutError(f"pod {namespace}/{name} not in {wanted}; history {got}")
                self._lock.wait(min(left, 0.2))

    # ------------------------------------------------------------------ node
    def evict(
        self, namespace: str, name: str, message: str = "The node was low on resource: memory.",
        disruption_target: bool = True,
    ) -> None:  # fmt: skip
        """Evicts a running pod the way a kubelet under node pressure does.

        The pod becomes Failed with ``status.reason`` ``Evicted`` and the message, its
        containers terminated with exit code 137; with ``disruption_target`` it also gets the
        ``DisruptionTarget`` condition (reason ``TerminationByKubelet``) that kubelets of
        Kubernetes 1.26+ add (the apiserver here is older, but stores the condition as given).

        Args:
            namespace: The pod's namespace.
            name: The pod's name.
            message: The eviction message.
            disruption_target: Add the ``DisruptionTarget`` condition.
        """
        with self._lock:
            rec = self._records.get((namespace, name))
            if rec is None or rec.terminal:
                raise ValueError(f"no running pod {namespace}/{name} on this kubelet")
            rec.finished_at = _now()
        if self.executor is not None:
            self.executor.kill(rec.uid)
        conditions = self._conditions(False, "ContainersNotReady")
        if disruption_target:
            conditions.append(
                self._condition("DisruptionTarget", True, "TerminationByKubelet", message)
            )
        status = {
            **self._base_status(rec),
            "phase": "Failed",
            "reason": "Evicted",
            "message": message,
            "conditions": conditions,
            **self._container_statuses(rec, self._terminated(rec, 137, "Error"), ready=False),
        }
        self._patch_status(rec, status)
        with self._lock:
            rec.set_state("failed")
            self._lock.notify_all()

    def _node_status(self) -> dict[str, Any]:
        now = _k8s_time(_now())
        return {
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "capacity": dict(self.capacity),
            "allocatable": dict(self.capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "tether test kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "machineID": "tether",
                "systemUUID": "tether",
                "bootID": "tether",
                "kernelVersion": "test",
                "osImage": "tether test kubelet",
                "containerRuntimeVersion": "fake://0.0.0",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _register_node(self) -> None:
        labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.node_labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": labels},
        }
        try:
            self.v1.create_node(body)
        except ApiException as err:
            if err.status != 409:
                raise
            self.v1.patch_node(self.node_name, {"metadata": {"labels": labels}})
        self.v1.patch_node_status(self.node_name, {"status": self._node_status()})

    # ------------------------------------------------------------------ watching
    def _list_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        if self.namespace:
            kwargs["namespace"] = self.namespace
        return kwargs

    def _watch_loop(self) -> None:
        func = (
            self.v1.list_namespaced_pod if self.namespace else self.v1.list_pod_for_all_namespaces
        )

        @functools.wraps(func)  # Watch reads the return type from the docstring
        def tracked(*args: Any, **kwargs: Any) -> Any:
            resp = func(*args, **kwargs)
            self._watch_resp = resp  # so that stop() can interrupt the blocking read
            if self._stop.is_set():
                _interrupt(resp)
            return resp

        while not self._stop.is_set():
            try:
                listing = func(**self._list_kwargs())
                seen = set()
                for pod in listing.items:
                    seen.add((pod.metadata.namespace, pod.metadata.name))
                    self._on_pod(pod)
                self._forget_missing(seen)
                w = watch.Watch()
                for event in w.stream(
                    tracked,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=self.watch_timeout,
                    _request_timeout=self.watch_timeout + 10,
                    **self._list_kwargs(),
                ):
                    if self._stop.is_set():
                        w.stop()
                        break
                    obj = event["object"]
                    if not isinstance(obj, V1Pod):
                        break
                    if event["type"] == "DELETED":
                        self._on_deleted(obj)
                    else:
                        self._on_pod(obj)
            except Exception as err:
                if self._stop.is_set():
                    return
                log.debug("test kubelet watch error: %r", err)
                self._stop.wait(0.5)

    def _forget_missing(self, present: set[tuple[str, str]]) -> None:
        with self._lock:
            for key, rec in self._records.items():
                if key not in present and rec.state != "deleted":
                    rec.set_state("deleted")
            self._lock.notify_all()

    def _on_deleted(self, pod: V1Pod) -> None:
        key = (pod.metadata.namespace, pod.metadata.name)
        with self._lock:
            rec = self._records.get(key)
            if rec is not None and rec.uid == pod.metadata.uid and rec.state != "deleted":
                rec.pod = pod
                rec.set_state("deleted")
                self._lock.notify_all()
            else:
                rec = None
        if rec is not None and self.executor is not None:
            self.executor.kill(rec.uid)

    def _on_pod(self, pod: V1Pod) -> None:
        meta, spec = pod.metadata, pod.spec
        key = (meta.namespace, meta.name)
        if spec.node_name and spec.node_name != self.node_name:
            return
        with self._lock:
            rec = self._records.get(key)
            if rec is not None and rec.uid != meta.uid:
                rec = None  # same name, new pod
            if rec is None:
                if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                    return  # finished before we saw it (e.g. an earlier kubelet)
                try:
                    behaviour = self._policy(pod)
                except Exception as err:
                    self.errors.append(f"policy failed for {key}: {err!r}")
                    return
                rec = PodRecord(meta.namespace, meta.name, meta.uid, behaviour, pod)
                self._records[key] = rec
                if spec.node_name == self.node_name:
                    self._schedule(key, "start", rec.uid, behaviour.start_delay)
                elif behaviour.outcome == UNSCHEDULABLE:
                    self._schedule(key, "unschedulable", rec.uid)
                else:
                    self._schedule(key, "bind", rec.uid)
            rec.pod = pod
            if meta.deletion_timestamp is not None and not rec.deleting and spec.node_name:
                rec.deleting = True
                self._schedule(key, "delete", rec.uid)
            self._lock.notify_all()

    # ------------------------------------------------------------------ driving
    def _schedule(self, key: tuple[str, str], action: str, uid: str, delay: float = 0.0) -> None:
        """Queues an action; the caller holds the lock."""
        heapq.heappush(self._queue, (time.monotonic() + delay, next(self._seq), key, action, uid))
        self._lock.notify_all()

    def _driver_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if not self._queue:
                    self._lock.wait(0.5)
                    continue
                due = self._queue[0][0] - time.monotonic()
                if due > 0:
                    self._lock.wait(min(due, 0.5))
                    continue
                _, _, key, action, uid = heapq.heappop(self._queue)
                rec = self._records.get(key)
                if rec is None or rec.uid != uid or rec.state == "deleted":
                    continue
                if rec.deleting and action != "delete":
                    continue
            try:
                self._run_action(rec, action)
            except ApiException as err:
                if err.status == 404:
                    with self._lock:
                        if rec.state != "deleted":
                            rec.set_state("deleted")
                        self._lock.notify_all()
                else:
                    self.errors.append(f"{action} {key}: {err.status} {err.reason} {err.body}")
                    log.warning("test kubelet: %s %s failed: %s", action, key, err)
            except Exception as err:
                self.errors.append(f"{action} {key}: {err!r}")
                log.warning("test kubelet: %s %s failed", action, key, exc_info=True)

    def _run_action(self, rec: PodRecord, action: str) -> None:
        key = (rec.namespace, rec.name)
        b = rec.behaviour
        if action == "bind":
            try:
                self._bind(rec)
            except ApiException as err:
                if err.status != 409:
                    raise
                with self._lock:  # already bound (another kubelet won): not ours
                    if self._records.get(key) is rec:
                        del self._records[key]
                return
            with self._lock:
                rec.set_state("bound")
                self._schedule(key, "start", rec.uid, b.start_delay)
        elif action == "unschedulable":
            self._patch_status(rec, self._unschedulable_status(b))
            with self._lock:
                rec.set_state("unschedulable")
        elif action == "start":
            self._start_containers(rec)
        elif action == "finish":
            self._finish(rec)
        elif action == "crash":
            self._crash(rec)
        elif action == "delete":
            if self.executor is not None:
                self.executor.kill(rec.uid)
            self.v1.delete_namespaced_pod(
                rec.name,
                rec.namespace,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=rec.uid)
                ),
            )
        else:  # pragma: no cover - internal error
            raise ValueError(action)
        with self._lock:
            self._lock.notify_all()

    def _bind(self, rec: PodRecord) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": rec.name, "namespace": rec.namespace, "uid": rec.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        # The response is a Status, which the generated client cannot map onto V1Binding.
        self.v1.create_namespaced_binding(rec.namespace, body, _preload_content=False)

    def _patch_status(self, rec: PodRecord, status: dict[str, Any]) -> None:
        self.v1.patch_namespaced_pod_status(rec.name, rec.namespace, {"status": status})

    @staticmethod
    def _condition(ctype: str, status: bool, reason: str = "", message: str = "") -> dict[str, Any]:
        cond: dict[str, Any] = {
            "type": ctype,
            "status": "True" if status else "False",
            "lastProbeTime": None,
            "lastTransitionTime": _k8s_time(_now()),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        return cond

    def _unschedulable_status(self, b: Behaviour) -> dict[str, Any]:
        return {
            "phase": "Pending",
            "conditions": [
                self._condition("PodScheduled", False, b.reason or "Unschedulable", b.message)
            ],
        }

    def _conditions(self, ready: bool, reason: str = "") -> list[dict[str, Any]]:
        return [
            self._condition("Initialized", True),
            self._condition("Ready", ready, "" if ready else reason),
            self._condition("ContainersReady", ready, "" if ready else reason),
            self._condition("PodScheduled", True),
        ]

    def _container_statuses(
        self, rec: PodRecord, state: dict[str, Any], *, ready: bool,
        last_state: dict[str, Any] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        statuses = []
        init_statuses = []
        for ctr in rec.pod.spec.containers:
            statuses.append(self._one_status(rec, ctr.name, ctr.image, state, ready, last_state))
        for ctr in rec.pod.spec.init_containers or []:
            done = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": _k8s_time(rec.started_at or _now()),
                    "finishedAt": _k8s_time(rec.started_at or _now()),
                }
            }
            init_statuses.append(self._one_status(rec, ctr.name, ctr.image, done, False, None))
        out: dict[str, Any] = {"containerStatuses": statuses}
        if init_statuses:
            out["initContainerStatuses"] = init_statuses
        return out

    @staticmethod
    def _one_status(
        rec: PodRecord, name: str, image: str | None, state: dict[str, Any], ready: bool,
        last_state: dict[str, Any] | None,
    ) -> dict[str, Any]:  # fmt: skip
        digest = hashlib.sha256(f"{image}".encode()).hexdigest()
        started = "running" in state
        status: dict[str, Any] = {
            "name": name,
            "image": image or "",
            "imageID": f"{image}@sha256:{digest}" if started or "terminated" in state else "",
            "ready": ready,
            "started": started,
            "restartCount": rec.restart_count,
            "state": state,
            "lastState": last_state or {},
        }
        if started or "terminated" in state:
            cid = hashlib.sha256(f"{rec.uid}/{name}/{rec.restart_count}".encode()).hexdigest()
            status["containerID"] = f"containerd://{cid}"
        return status

    def _base_status(self, rec: PodRecord) -> dict[str, Any]:
        start = rec.pod.status.start_time if rec.pod.status else None
        return {
            "hostIP": LOOPBACK,
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": _k8s_time(start or _now()),
            "qosClass": (rec.pod.status.qos_class if rec.pod.status else None) or "BestEffort",
        }

    def _start_containers(self, rec: PodRecord) -> None:
        b = rec.behaviour
        key = (rec.namespace, rec.name)
        if b.outcome == WAITING:
            message = b.message or (
                f'Back-off pulling image "{rec.pod.spec.containers[0].image}"'
                if b.reason == "ImagePullBackOff"
                else f"rpc error: code = Unknown desc = failed to pull image "
                f'"{rec.pod.spec.containers[0].image}": not found'
            )
            waiting = {"waiting": {"reason": b.reason or "ErrImagePull", "message": message}}
            status = {
                **self._base_status(rec),
                "phase": "Pending",
                "conditions": self._conditions(False, "ContainersNotReady"),
                **self._container_statuses(rec, waiting, ready=False),
            }
            self._patch_status(rec, status)
            with self._lock:
                rec.set_state("waiting")
            return
        started = _now()
        with self._lock:
            rec.started_at = started
        running = {"running": {"startedAt": _k8s_time(started)}}
        status = {
            **self._base_status(rec),
            "phase": "Running",
            "conditions": self._conditions(True),
            **self._container_statuses(rec, running, ready=True),
        }
        self._patch_status(rec, status)
        with self._lock:
            rec.set_state("running")
            if b.outcome == PROCESS:
                self._exec(rec)
            elif b.outcome in (SUCCEED, FAIL):
                self._schedule(key, "finish", rec.uid, b.run_seconds)
            elif b.outcome == CRASH_LOOP:
                self._schedule(key, "crash", rec.uid, b.run_seconds)

    def _exec(self, rec: PodRecord) -> None:
        """Starts the pod's process; when it exits, finishes the pod with its exit code."""
        if self.executor is None:
            raise RuntimeError("Behaviour.run_process() needs FakeKubelet(executor=PodExecutor())")
        key, uid = (rec.namespace, rec.name), rec.uid

        def exited(code: int) -> None:
            with self._lock:
                cur = self._records.get(key)
                if cur is None or cur.uid != uid:
                    return
                ok = code == 0
                cur.behaviour = replace(
                    cur.behaviour, outcome=SUCCEED if ok else FAIL, exit_code=code,
                    reason="Completed" if ok else "Error",
                )  # fmt: skip
                self._schedule(key, "finish", uid)

        self.executor.start(rec.pod, exited)

    def _terminated(self, rec: PodRecord, exit_code: int, reason: str) -> dict[str, Any]:
        return {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": _k8s_time(rec.started_at or _now()),
                "finishedAt": _k8s_time(rec.finished_at or _now()),
                "containerID": "containerd://"
                + hashlib.sha256(f"{rec.uid}/{rec.restart_count}".encode()).hexdigest(),
            }
        }

    def _finish(self, rec: PodRecord) -> None:
        b = rec.behaviour
        ok = b.outcome == SUCCEED
        with self._lock:
            rec.finished_at = _now()
        terminated = self._terminated(
            rec, 0 if ok else b.exit_code, b.reason or ("Completed" if ok else "Error")
        )
        if b.message:
            terminated["terminated"]["message"] = b.message
        status = {
            **self._base_status(rec),
            "phase": "Succeeded" if ok else "Failed",
            "conditions": self._conditions(False, "PodCompleted" if ok else "ContainersNotReady"),
            **self._container_statuses(rec, terminated, ready=False),
        }
        self._patch_status(rec, status)
        with self._lock:
            rec.set_state("succeeded" if ok else "failed")

    def _crash(self, rec: PodRecord) -> None:
        b = rec.behaviour
        with self._lock:
            rec.finished_at = _now()
        last = self._terminated(rec, b.exit_code, "Error")
        with self._lock:
            rec.restart_count += 1
        waiting = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": b.message
                or f"back-off 10s restarting failed container of pod {rec.namespace}/{rec.name}",
            }
        }
        status = {
            **self._base_status(rec),
            "phase": "Running",
            "conditions": self._conditions(False, "ContainersNotReady"),
            **self._container_statuses(rec, waiting, ready=False, last_state=last),
        }
        self._patch_status(rec, status)
        with self._lock:
            if rec.state != "crash_loop":
                rec.set_state("crash_loop")
            self._schedule((rec.namespace, rec.name), "crash", rec.uid, b.run_seconds)

    # ------------------------------------------------------------------ logs
    def _lines(self, pod: V1Pod, container: str, started: datetime) -> list[tuple[datetime, str]]:
        if self.executor is not None:
            ran = self.executor.lines(pod.metadata.uid)
            if ran is not None:
                return ran
        if self._logs is None:
            return []
        items = self._logs(pod, container) if self._logs_take_container else self._logs(pod)
        out = []
        for i, item in enumerate(items):
            if isinstance(item, tuple):
                ts, text = item
                ts = ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
            else:
                ts, text = started + timedelta(microseconds=i), item
            out.append((ts, text))
        return out

    def serve_logs(
        self, namespace: str, name: str, container: str, query: dict[str, str]
    ) -> tuple[int, str, Iterator[bytes]]:
        """Answers a ``/containerLogs`` request like the kubelet.

        Args:
            namespace: Pod namespace.
            name: Pod name.
            container: Container name.
            query: Query parameters (``follow``, ``sinceSeconds``, ``sinceTime``,
                ``timestamps``, ``tailLines``, ``limitBytes``, ``previous``).

        Returns:
            HTTP status, error text (when not 200), and the body chunks.
        """
        with self._lock:
            rec = self._records.get((namespace, name))
            snapshot = None if rec is None else replace(rec, history=list(rec.history))
        if snapshot is None:
            return 404, f'pod "{name}" not found on node {self.node_name}', iter(())
        names = [c.name for c in snapshot.pod.spec.containers]
        names += [c.name for c in snapshot.pod.spec.init_containers or []]
        if container not in names:
            return 400, f'container "{container}" not found in pod "{name}"', iter(())
        if snapshot.started_at is None:
            waiting = snapshot.state == "waiting"
            reason = snapshot.behaviour.reason if waiting else "ContainerCreating"
            return (
                400,
                f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                iter(()),
            )
        if _truthy(query.get("previous")) and snapshot.restart_count == 0:
            return (
                400,
                f'previous terminated container "{container}" in pod "{name}" not found',
                iter(()),
            )
        since: datetime | None = None
        if query.get("sinceSeconds"):
            since = _now() - timedelta(seconds=int(query["sinceSeconds"]))
        elif query.get("sinceTime"):
            since = _parse_time(query["sinceTime"])
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        stamps = _truthy(query.get("timestamps"))
        follow = _truthy(query.get("follow")) and not _truthy(query.get("previous"))
        return 200, "", self._log_chunks(
            snapshot, container, since=since, tail=tail, limit=limit, stamps=stamps,
            follow=follow,
        )  # fmt: skip

    def _log_chunks(
        self, rec: PodRecord, container: str, *, since: datetime | None, tail: int | None,
        limit: int | None, stamps: bool, follow: bool,
    ) -> Iterator[bytes]:  # fmt: skip
        key = (rec.namespace, rec.name)
        started = rec.started_at or _now()
        sent_bytes = 0

        def render(lines: Sequence[tuple[datetime, str]]) -> Iterator[bytes]:
            nonlocal sent_bytes
            for ts, text in lines:
                if since is not None and ts < since:
                    continue
                line = (f"{_log_time(ts)} {text}" if stamps else text).rstrip("\n") + "\n"
                data = line.encode()
                if limit is not None:
                    data = data[: max(0, limit - sent_bytes)]
                if data:
                    sent_bytes += len(data)
                    yield data
                if limit is not None and sent_bytes >= limit:
                    return

        lines = self._lines(rec.pod, container, started)
        first = lines[-tail:] if tail is not None and tail > 0 else ([] if tail == 0 else lines)
        yield from render(first)
        sent = len(lines)
        while follow and not self._stop.is_set():
            if limit is not None and sent_bytes >= limit:
                return
            with self._lock:
                cur = self._records.get(key)
                done = cur is None or cur.uid != rec.uid or cur.terminal
                pod = rec.pod if cur is None else cur.pod
            lines = self._lines(pod, container, started)
            if len(lines) > sent:
                yield from render(lines[sent:])
                sent = len(lines)
            if done:
                return
            time.sleep(0.1)


def _interrupt(resp: Any) -> None:
    """Interrupts a blocking read on a streaming urllib3 response from another thread."""
    if resp is None:
        return
    with contextlib.suppress(Exception):
        if hasattr(resp, "shutdown"):  # urllib3 >= 2.3
            resp.shutdown()
            return
    with contextlib.suppress(Exception):
        sock = resp._fp.fp.raw._sock  # urllib3 1.x / older 2.x
        sock.shutdown(socket.SHUT_RDWR)


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in {"1", "true", "yes"}


def _positional_arity(func: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return 2
    return sum(
        p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for p in params
    )


def port_is_open(port: int, host: str = LOOPBACK) -> bool:
    """Returns whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0
